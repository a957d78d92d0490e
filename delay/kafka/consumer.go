package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hourglass/hourglass"
)

// Limits of a tier consumer.
const (
	// lookahead is how far ahead of its release a coarse tier's partition
	// is fetched into memory: fetching stops while the newest record held
	// is due later than that. It hides the fetch latency of a resumed
	// partition (FetchMaxWait) and bounds memory to about a second of
	// records per partition.
	lookahead = time.Second
	// maxHeld is the most timers held per partition; the finest tier,
	// whose records are not in deadline order, pauses at it.
	maxHeld = 50_000
	// fetchMaxPartitionBytes bounds one fetch of a partition (Kafka still
	// returns a whole record batch if it is larger): about 5,000 records.
	fetchMaxPartitionBytes = 256 << 10
	// maxPollRecords is the most records taken per poll.
	maxPollRecords = 10_000
	// forwardBatch is the most timers forwarded per produce.
	forwardBatch = 2_000
	// batchesPerStep is the most deliveries or forwards between two polls,
	// so that rebalances and new records are not held up by a backlog.
	batchesPerStep = 4
	// maxWait is the longest a consumer polls without looking at its
	// held records again.
	maxWait = time.Second
)

// consumer consumes one tier's topic: it holds the records it fetched
// until they are due, then forwards them to a finer tier (coarse tiers) or
// delivers them (the finest tier), and commits offsets after the effect. It
// reads the partitions this process owns (Scheduler.Own), assigned
// directly, and commits their offsets to its group without joining it. A
// consumer draining a topic of an older version (drain) reads it in that
// version's consumer group instead and forwards every record at once. Its
// state is used by the goroutine running run only (one Run at a time); the
// rebalance callbacks of a draining consumer pass revoked partitions
// through revoked.
type consumer struct {
	s       *Scheduler
	tier    tier
	topic   string
	group   string
	deliver hourglass.Deliver
	cl      *kgo.Client
	parts   map[int32]*partition

	// assigned holds the partitions being consumed (from Scheduler.Own);
	// drain marks a consumer of an older version's topic, in its group.
	assigned map[int32]bool
	drain    bool

	// Finest tier: no delivery before retryAt (unix ms) after a failure.
	retryAt int64
	backoff time.Duration

	revokedMu sync.Mutex
	revoked   []int32
}

// newConsumer returns the consumer of topic, the topic of tier t, with its
// own client; drain marks a topic of an older version, to drain.
func (s *Scheduler) newConsumer(t tier, topic string, drain bool) (*consumer, error) {
	c := &consumer{s: s, tier: t, topic: topic, group: topic + ".group", parts: map[int32]*partition{}, drain: drain}
	opts := append(s.clientOpts(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(s.cfg.FetchMaxWait),
		// A coarse tier holds what one fetch brought of a partition until
		// the newest record is a second from due: keep that small.
		kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
		kgo.FetchMaxBytes(16<<20),
	)
	if !drain {
		// No group: partitions are added and removed by syncOwned.
		c.assigned = map[int32]bool{}
	} else {
		opts = append(opts,
			kgo.ConsumerGroup(c.group),
			kgo.ConsumeTopics(c.topic),
			kgo.DisableAutoCommit(),
			// Rebalance callbacks run only between polls, never while a
			// polled batch is being forwarded or delivered.
			kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsRevoked(c.onRevoked),
			kgo.OnPartitionsLost(c.onRevoked),
			kgo.SessionTimeout(s.cfg.SessionTimeout),
			// Members learn of a rebalance at their next heartbeat: the
			// partitions that move wait for it.
			kgo.HeartbeatInterval(min(250*time.Millisecond, s.cfg.SessionTimeout/3)),
		)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: consumer client for %s: %w", c.topic, err)
	}
	c.cl = cl
	return c, nil
}

// onRevoked is the OnPartitionsRevoked and OnPartitionsLost callback. It
// does not commit: the consumer commits right after every effect. It
// resumes the partitions (a pause outlives the assignment) and leaves their
// held records to be dropped by run before it adds what the next poll
// returns; the next owner consumes them again from the committed offset.
func (c *consumer) onRevoked(_ context.Context, cl *kgo.Client, partitions map[string][]int32) {
	ps := partitions[c.topic]
	if len(ps) == 0 {
		return
	}
	c.revokedMu.Lock()
	c.revoked = append(c.revoked, ps...)
	c.revokedMu.Unlock()
	cl.ResumeFetchPartitions(map[string][]int32{c.topic: ps})
}

// dropRevoked forgets the partitions revoked since the last call.
func (c *consumer) dropRevoked() {
	c.revokedMu.Lock()
	ps := c.revoked
	c.revoked = nil
	c.revokedMu.Unlock()
	if len(ps) == 0 {
		return
	}
	for _, p := range ps {
		delete(c.parts, p)
	}
	// A pause set after the callback ran (for a partition run had not yet
	// forgotten) must not outlive it either.
	c.cl.ResumeFetchPartitions(map[string][]int32{c.topic: ps})
}

// run consumes until ctx ends (it returns nil) or the brokers fail (it
// returns the error). The client stays in its group for the next run.
func (c *consumer) run(ctx context.Context) error {
	// Between runs, rebalances must not wait for a poll that will not come.
	defer c.cl.AllowRebalance()
	c.dropRevoked() // revoked between runs
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := c.syncOwned(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := c.s.clock.Now()
		if err := c.step(ctx, now); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now = c.s.clock.Now()
		c.updatePauses(hourglass.UnixMilli(now))
		wait := c.wait(now)
		c.cl.AllowRebalance()
		var fetches kgo.Fetches
		if wait <= 0 {
			fetches = c.cl.PollRecords(nil, maxPollRecords) //nolint:staticcheck // nil: take what is buffered, do not wait
		} else {
			fetches = c.poll(ctx, wait)
		}
		if fetches.IsClientClosed() {
			return errors.New("kafka: consumer client closed")
		}
		// Revocations that completed before this poll returned: the poll
		// holds no record of the old assignment of those partitions.
		c.dropRevoked()
		for _, fe := range fetches.Errors() {
			if err := c.fetchError(fe); err != nil {
				return err
			}
		}
		fetches.EachRecord(c.add)
	}
}

// poll waits at most wait for records, or until the partitions owned
// change.
func (c *consumer) poll(ctx context.Context, wait time.Duration) kgo.Fetches {
	pollCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !c.drain {
		_, changed := c.s.ownedParts()
		go func() {
			select {
			case <-changed:
				cancel()
			case <-pollCtx.Done():
			}
		}()
	}
	return c.cl.PollRecords(pollCtx, maxPollRecords)
}

// wanted returns whether the process owns each partition now.
func (c *consumer) wanted() func(int32) bool {
	owned, _ := c.s.ownedParts()
	return func(p int32) bool { return owned == nil || slices.Contains(owned, int(p)) }
}

// syncOwned makes the consumer read exactly the partitions this process
// owns: it forgets those it lost (what it holds of them is neither
// forwarded, delivered nor committed: their new owner reads them again
// from the committed offset) and starts those it gained at their committed
// offset. A draining consumer has nothing to do.
func (c *consumer) syncOwned(ctx context.Context) error {
	if c.drain {
		return nil
	}
	want := c.wanted()
	c.dropUnowned(want)
	var gained []int32
	for p := range int32(hourglass.Partitions) {
		if want(p) && !c.assigned[p] {
			gained = append(gained, p)
		}
	}
	if len(gained) == 0 {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, c.s.cfg.Timeout)
	defer cancel()
	committed, err := kadm.NewClient(c.s.producer).FetchOffsets(fctx, c.group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("kafka: committed offsets of %s: %w", c.group, err)
	}
	start := make(map[int32]kgo.Offset, len(gained))
	for _, p := range gained {
		o, ok := committed.Lookup(c.topic, p)
		switch {
		case ok && o.Err != nil:
			return fmt.Errorf("kafka: committed offset of %s partition %d: %w", c.topic, p, o.Err)
		case ok && o.At >= 0:
			start[p] = kgo.NewOffset().At(o.At)
		default:
			start[p] = kgo.NewOffset().AtStart()
		}
		c.assigned[p] = true
	}
	c.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: start})
	c.s.log.Debug("kafka: consuming partitions gained", "topic", c.topic, "partitions", gained)
	return nil
}

// dropUnowned stops consuming the partitions that want no longer holds
// and forgets what it fetched of them.
func (c *consumer) dropUnowned(want func(int32) bool) {
	var lost []int32
	for p := range c.assigned {
		if !want(p) {
			lost = append(lost, p)
			delete(c.assigned, p)
			delete(c.parts, p)
		}
	}
	if len(lost) > 0 {
		c.cl.RemoveConsumePartitions(map[string][]int32{c.topic: lost})
		c.cl.ResumeFetchPartitions(map[string][]int32{c.topic: lost}) // a pause outlives the assignment
		c.s.log.Debug("kafka: stopped consuming partitions lost", "topic", c.topic, "partitions", lost)
	}
}

// fetchError returns the error of a failed fetch or group session that
// the client will not get over by itself (the broker refused with a
// non-retriable code: not authorized, topic deleted…). The others (the
// broker unreachable, a coordinator moving) the client retries on its own;
// they are logged, and a broker that stays away fails the ping of Run.
func (c *consumer) fetchError(fe kgo.FetchError) error {
	if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
		return nil // the poll's own timeout
	}
	var ke *kerr.Error
	if errors.As(fe.Err, &ke) && !ke.Retriable {
		if fe.Topic == "" {
			return fmt.Errorf("kafka: consume %s: %w", c.topic, fe.Err)
		}
		return fmt.Errorf("kafka: consume %s partition %d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	c.s.log.Debug("kafka: consume: the client retries", "topic", c.topic, "partition", fe.Partition, "err", fe.Err)
	return nil
}

// add holds a fetched record.
func (c *consumer) add(rec *kgo.Record) {
	if !c.drain && !c.assigned[rec.Partition] {
		return // fetched before the partition was lost: its owner reads it
	}
	p := c.parts[rec.Partition]
	if p == nil {
		p = &partition{}
		c.parts[rec.Partition] = p
	}
	vs, err := decodeTimers(rec.Value)
	if err != nil {
		c.s.log.Warn("kafka: skipping a record that is not a timer; the sweeper closes its order if it had one",
			"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
		vs = nil
	}
	due := func(v timerValue) int64 { return v.Release }
	switch {
	case c.drain:
		due = func(timerValue) int64 { return 0 } // forwarded at once, to the tier its remaining delay calls for
	case c.tier.hold == 0:
		due = func(v timerValue) int64 { return v.Deadline } // the finest tier waits for the deadline itself
	}
	p.add(rec, vs, due)
}

// step forwards or delivers what is due at now and commits.
func (c *consumer) step(ctx context.Context, now time.Time) error {
	for range batchesPerStep {
		var n int
		var err error
		if c.tier.hold == 0 && !c.drain {
			n, err = c.deliverDue(ctx, now)
		} else {
			n, err = c.forwardDue(ctx, now)
		}
		if err != nil || n == 0 {
			return err
		}
		now = c.s.clock.Now()
	}
	return nil
}

// collectDue pops up to limit timers due at or before now (unix ms).
func (c *consumer) collectDue(now int64, limit int) []dueItem {
	var (
		due []dueItem
		buf []*item
	)
	for _, p := range c.parts {
		buf = p.popDue(now, limit-len(due), buf[:0])
		for _, it := range buf {
			due = append(due, dueItem{it, p})
		}
		if len(due) >= limit {
			break
		}
	}
	return due
}

// dueItem is a due timer and the partition holding it.
type dueItem struct {
	it *item
	p  *partition
}

// deliverDue hands the due timers of the finest tier to deliver (one batch)
// and commits them. A failed delivery is retried after a backoff; it is not
// an error of Run. It returns how many timers it delivered.
func (c *consumer) deliverDue(ctx context.Context, now time.Time) (int, error) {
	nowMs := hourglass.UnixMilli(now)
	if nowMs < c.retryAt {
		return 0, nil
	}
	// A partition lost since the last poll is not delivered from.
	c.dropUnowned(c.wanted())
	due := c.collectDue(nowMs, c.s.cfg.DeliverBatch)
	if len(due) == 0 {
		return 0, nil
	}
	timers := make([]hourglass.DueItem, len(due))
	for i, d := range due {
		timers[i] = hourglass.DueItem{ID: d.it.timer.OrderID, At: hourglass.FromUnixMilli(d.it.timer.Deadline)}
	}
	if err := c.deliver(ctx, timers); err != nil {
		for _, d := range due {
			d.p.requeue(d.it)
		}
		if ctx.Err() != nil {
			return 0, nil
		}
		c.backoff = min(max(2*c.backoff, 50*time.Millisecond), c.s.cfg.RetryMax)
		c.retryAt = hourglass.UnixMilli(c.s.clock.Now().Add(c.backoff))
		c.s.log.Warn("kafka: delivery failed; retrying", "timers", len(timers), "retry_in", c.backoff, "err", err)
		return 0, nil
	}
	c.backoff, c.retryAt = 0, 0
	for _, d := range due {
		d.it.finish()
	}
	return len(due), c.commit(ctx)
}

// forwardDue writes the released timers of a coarse tier to the tier their
// remaining delay calls for (one batch, packed), waits for the acks and
// commits.
func (c *consumer) forwardDue(ctx context.Context, now time.Time) (int, error) {
	if !c.drain { // a partition lost since the last poll is not forwarded from
		c.dropUnowned(c.wanted())
	}
	due := c.collectDue(hourglass.UnixMilli(now), forwardBatch)
	if len(due) == 0 {
		return 0, nil
	}
	vs := make([]timerValue, len(due))
	for i, d := range due {
		vs[i] = d.it.timer
	}
	recs := c.s.records(vs, now)
	// Finish a forward that began even if ctx ends: abandoning it would
	// only make duplicates.
	if err := c.s.produce(context.WithoutCancel(ctx), recs); err != nil {
		for _, d := range due {
			d.p.requeue(d.it)
		}
		return 0, fmt.Errorf("kafka: forward %d timers from %s: %w", len(vs), c.topic, err)
	}
	for _, d := range due {
		d.it.finish()
	}
	return len(due), c.commit(ctx)
}

// commit commits, per partition, the offset after the done prefix of its
// records. A commit refused because the group is rebalancing is not an
// error: the next owner consumes those records again (duplicates).
func (c *consumer) commit(ctx context.Context) error {
	var recs []*kgo.Record
	for _, p := range c.parts {
		if r := p.advance(); r != nil {
			recs = append(recs, r)
		}
	}
	if len(recs) == 0 {
		return nil
	}
	// The effects happened: commit them even if ctx just ended.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.s.cfg.Timeout)
	defer cancel()
	if !c.drain {
		// Not a member of its group: the offsets are committed as a
		// simple consumer's, which the broker accepts while the group has
		// no members (it never has).
		os := make(kadm.Offsets)
		for _, r := range recs {
			os.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.Offset + 1, LeaderEpoch: r.LeaderEpoch})
		}
		if err := kadm.NewClient(c.s.producer).CommitAllOffsets(cctx, c.group, os); err != nil {
			// Not an error of Run: the effects happened, and the next
			// commit of the partition covers these offsets too; if none
			// comes before the partition moves, its next owner reads
			// these records again (duplicates, no-op closes). A broker
			// that is gone fails the ping. (kadm resolves the topic's id
			// from metadata first, and reports a lookup that failed as
			// UNKNOWN_TOPIC_OR_PARTITION.)
			c.s.log.Warn("kafka: commit failed; the next commit covers these offsets", "topic", c.topic, "err", err)
		}
		return nil
	}
	err := c.cl.CommitRecords(cctx, recs...)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.RebalanceInProgress), errors.Is(err, kerr.IllegalGeneration),
		errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.FencedInstanceID),
		errors.Is(err, kerr.StaleMemberEpoch):
		c.s.log.Info("kafka: commit refused during a rebalance; the records will be consumed again", "topic", c.topic, "err", err)
		return nil
	}
	return fmt.Errorf("kafka: commit %s: %w", c.topic, err)
}

// updatePauses pauses the partitions whose held records reach far enough
// ahead, and resumes the others.
func (c *consumer) updatePauses(now int64) {
	var pause, resume []int32
	for id, p := range c.parts {
		want := p.wantPause(now, c.lookahead(), maxHeld)
		if want == p.paused {
			continue
		}
		p.paused = want
		if want {
			pause = append(pause, id)
		} else {
			resume = append(resume, id)
		}
	}
	if len(pause) > 0 {
		c.cl.PauseFetchPartitions(map[string][]int32{c.topic: pause})
	}
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(map[string][]int32{c.topic: resume})
	}
}

// lookahead returns lookahead in ms for a coarse tier, -1 for the finest
// and for a topic drained (all of whose records are due at once).
func (c *consumer) lookahead() int64 {
	if c.tier.hold == 0 || c.drain {
		return -1
	}
	return lookahead.Milliseconds()
}

// wait returns how long run may poll before something is due: the earliest
// held record (after a failed delivery, not before the retry), or a paused
// partition that must resume.
func (c *consumer) wait(now time.Time) time.Duration {
	nowMs := hourglass.UnixMilli(now)
	next := hourglass.UnixMilli(now.Add(maxWait))
	for _, p := range c.parts {
		if d, ok := p.nextDue(); ok {
			next = min(next, max(d, c.retryAt))
		}
		if la := c.lookahead(); p.paused && la >= 0 && p.held() < maxHeld {
			next = min(next, p.lastDue-la)
		}
	}
	if next <= nowMs {
		return 0
	}
	return hourglass.FromUnixMilli(next).Sub(now)
}

// close leaves the group, waiting at most Config.Timeout when the brokers
// are gone, and closes the client.
func (c *consumer) close() {
	if !c.drain { // not a member of its group
		c.cl.Close()
		return
	}
	c.cl.AllowRebalance()
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.Timeout)
	defer cancel()
	if err := c.cl.LeaveGroupContext(ctx); err != nil {
		c.s.log.Debug("kafka: leave group", "group", c.topic+".group", "err", err)
	}
	c.cl.Close()
}
