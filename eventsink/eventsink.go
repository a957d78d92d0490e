// Package eventsink publishes hourglass's durable event log (the events
// table: order.*, timer.fired, source.closed, every row) to the message
// buses a shop's consumers already listen to: Kafka, RabbitMQ, NATS
// JetStream and Redis Streams, one subpackage each (eventsink/kafka,
// eventsink/amqp, eventsink/nats, eventsink/redis). This package holds the
// broker-agnostic part: the Publisher, which reads the log in seq order,
// hands pages of events to a Sink, and records how far it got in a cursor
// per (sink, partition) in the database.
//
// # Guarantees
//
// At least once: a cursor moves only past events the broker acknowledged,
// so after a crash, an outage or a lease handoff an event may be published
// again (its id is the message id: consumers drop duplicates by it), never
// skipped. In order per key: the events of one order (or timer) are written
// by transactions that follow each other, so they are read, and published,
// in seq order; a Sink keeps the order of a Publish call per key. Events
// wait in the database while a broker is down, retried with backoff without
// limit in time; memory holds one page. Each partition's events are
// published by the node that owns the partition (Ownership).
//
// # Reading a log whose seqs are not in commit order
//
// PostgreSQL's sequences and MySQL's AUTO_INCREMENT hand out seqs before
// commit, so an event with a smaller seq can become visible after one with
// a larger seq that was already published. A cursor "every seq up to N is
// published" would skip it. The Publisher therefore reads every partition's
// events (one range of the primary key), and remembers each hole in the
// seqs it read (a gap: a transaction in flight, or rolled back, or events
// pruned before the sink started) with the time it first saw it. Each poll
// reads the new events, then reads the open gaps again, and publishes what
// it found in seq order: an event that fills a gap has no later event of
// its order already published, since that one's transaction started after
// the gap's committed. A gap open for longer than Settle is let go (a
// transaction does not hold a seq uncommitted that long: the stores time
// out idle and lock-waiting transactions well before). The durable cursor
// is the highest seq below every open gap, written for each owned
// partition.
//
// A cursor not touched for longer than the event retention is ignored by
// the stores' pruning: a sink removed from every node's configuration
// stops holding events one retention after its last publish. A sink's
// identity is its redacted URL (Redact): changing it (other than the
// password) makes a new sink, which starts from the oldest retained event.
package eventsink

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/timing"
)

// Message is one event as a Sink publishes it.
type Message struct {
	// ID is the event's id ("evt_…"): the message id, or the field
	// consumers drop duplicates by.
	ID   string
	Type hourglass.EventType
	// Key is the order's id in decimal, a timer's key (timer.fired) or
	// "<source>:<row key>" (source.closed, source.expiring): the key whose
	// messages stay in order (Kafka's record key).
	Key string
	// Seq is the event's position in the log; Partition its hourglass
	// partition (PartitionOf of the order or timer id).
	Seq       int64
	Partition int
	CreatedAt time.Time
	// Body is the event's JSON exactly as delivered to webhooks.
	Body []byte
}

// Sink publishes messages to one destination of one broker. A Sink is used
// by one Publisher goroutine at a time.
type Sink interface {
	// Publish publishes msgs and returns nil once the broker has
	// acknowledged every one as stored. Messages of one Key must reach the
	// destination in the order given. On an error any of them may have been
	// published: the Publisher publishes them all again (at least once).
	// It returns when ctx ends.
	Publish(ctx context.Context, msgs []Message) error
	// Close releases the connection. It is idempotent.
	Close() error
}

// Ownership is the partitions this node publishes: cluster.Membership
// implements it. OnChange's fn must not block.
type Ownership interface {
	Owned() hourglass.Parts
	OnChange(fn func(gained, lost []int))
}

// Observer is told what a Publisher does; nil fields of Config mean none.
// Its methods must not block.
type Observer interface {
	// EventsPublished counts events a sink's broker acknowledged.
	EventsPublished(sink string, n int)
	// EventSinkFailed counts failed publishes and reads (each retried).
	EventSinkFailed(sink string)
}

// Defaults of Config.
const (
	BatchDefault        = 500
	PollDefault         = 50 * time.Millisecond
	SettleDefault       = 30 * time.Second
	MaxGapsDefault      = 1024
	SaveIntervalDefault = time.Second
	// TouchIntervalDefault is how often cursors are written even when
	// they did not move (a sink that is down, or idle), so that pruning
	// keeps honouring them.
	TouchIntervalDefault = time.Minute
	BackoffMinDefault    = 100 * time.Millisecond
	BackoffMaxDefault    = 10 * time.Second
)

// Config configures a Publisher. Zero fields take their defaults.
type Config struct {
	// Name is the sink's identity, its redacted URL (Redact): the cursors'
	// key, the metrics' label. Required.
	Name string
	// Sink publishes; Log is the store. Required.
	Sink Sink
	Log  hourglass.EventLog
	// Ownership is the partitions this node publishes; nil: every one.
	Ownership Ownership
	// Batch is the most events read and published at once (default
	// BatchDefault, at most 10000); Poll how long an idle Publisher waits
	// before reading again (default PollDefault).
	Batch int
	Poll  time.Duration
	// Settle is how long a gap in the seqs is waited for (see the package
	// comment; default SettleDefault); MaxGaps bounds the gaps held
	// (default MaxGapsDefault): beyond it the Publisher reads no new
	// events until some settle.
	Settle  time.Duration
	MaxGaps int
	// SaveInterval spaces the cursor writes (default
	// SaveIntervalDefault); TouchInterval bounds the time between two
	// (default TouchIntervalDefault).
	SaveInterval, TouchInterval time.Duration
	// BackoffMin and BackoffMax space the retries of a failed publish or
	// read (defaults BackoffMinDefault, BackoffMaxDefault).
	BackoffMin, BackoffMax time.Duration
	Clock                  hourglass.Clock
	Logger                 *slog.Logger
	Observer               Observer
}

// Validate checks c's required fields and ranges.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("eventsink: Name is required")
	case c.Sink == nil:
		return fmt.Errorf("eventsink %s: Sink is required", c.Name)
	case c.Log == nil:
		return fmt.Errorf("eventsink %s: Log is required", c.Name)
	case c.Batch < 0 || c.Batch > 10000:
		return fmt.Errorf("eventsink %s: Batch must be 1..10000, got %d", c.Name, c.Batch)
	case c.Poll < 0 || c.Settle < 0 || c.MaxGaps < 0 || c.SaveInterval < 0 || c.TouchInterval < 0 || c.BackoffMin < 0 || c.BackoffMax < 0:
		return fmt.Errorf("eventsink %s: durations and MaxGaps must not be negative", c.Name)
	}
	return nil
}

// gap is a range of seqs not seen yet, below the highest seq read.
type gap struct {
	from, to int64
	seen     time.Time // first seen: let go Settle after
}

// Publisher publishes one sink's events. Run it once; Lag and Published
// are safe for concurrent use.
type Publisher struct {
	cfg   Config
	clock hourglass.TimerClock
	log   *slog.Logger
	obs   Observer

	changed chan struct{} // ownership changed (buffered 1)
	dirty   atomic.Bool
	// oldest is the creation time (unix ns) of the oldest event read and
	// not yet acknowledged; 0 when caught up.
	oldest    atomic.Int64
	published atomic.Int64

	// The loop's state; reset when ownership changes.
	owned    hourglass.Parts
	mask     int64
	cursors  map[int]int64 // durable, as loaded or last saved
	read     int64         // highest seq read
	gaps     []gap
	lastSave time.Time
	moved    bool     // cursors to save
	hand     *pending // a page whose publish failed
}

// New returns a Publisher of cfg, or cfg.Validate's error.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.Poll = cmp.Or(cfg.Poll, PollDefault)
	cfg.Settle = cmp.Or(cfg.Settle, SettleDefault)
	cfg.MaxGaps = cmp.Or(cfg.MaxGaps, MaxGapsDefault)
	cfg.SaveInterval = cmp.Or(cfg.SaveInterval, SaveIntervalDefault)
	cfg.TouchInterval = cmp.Or(cfg.TouchInterval, TouchIntervalDefault)
	cfg.BackoffMin = cmp.Or(cfg.BackoffMin, BackoffMinDefault)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, BackoffMaxDefault)
	p := &Publisher{
		cfg:     cfg,
		clock:   hourglass.WithTimers(cfg.Clock),
		log:     cmp.Or(cfg.Logger, slog.Default()).With("sink", cfg.Name),
		obs:     cfg.Observer,
		changed: make(chan struct{}, 1),
	}
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	if cfg.Ownership != nil {
		cfg.Ownership.OnChange(func(_, _ []int) {
			p.dirty.Store(true)
			select {
			case p.changed <- struct{}{}:
			default:
			}
		})
	}
	return p, nil
}

// Name returns the sink's redacted URL.
func (p *Publisher) Name() string { return p.cfg.Name }

// Lag returns the age of the oldest event read and not yet on the bus: 0
// when the Publisher is caught up. While the broker is down it grows.
func (p *Publisher) Lag() time.Duration {
	ns := p.oldest.Load()
	if ns == 0 {
		return 0
	}
	return max(p.clock.Now().Sub(time.Unix(0, ns)), 0)
}

// Published returns how many events this Publisher's broker acknowledged.
func (p *Publisher) Published() int64 { return p.published.Load() }

// Run publishes until ctx ends, then saves the cursors (best effort) and
// returns nil. Failures of the broker or the database are logged and
// retried with backoff, without limit in time.
func (p *Publisher) Run(ctx context.Context) error {
	bo := timing.Backoff{Min: p.cfg.BackoffMin, Max: p.cfg.BackoffMax}
	failing := false
	defer func() {
		saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if p.moved {
			_ = p.save(saveCtx)
		}
	}()
	for ctx.Err() == nil {
		more, err := p.step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			p.obs.EventSinkFailed(p.cfg.Name)
			wait := bo.Next()
			if !failing {
				p.log.Warn("eventsink: publishing failed; retrying with backoff (events wait in the database)", "err", err, "retry_in", wait)
			} else {
				p.log.Debug("eventsink: publishing failed again", "err", err, "retry_in", wait)
			}
			failing = true
			if p.sleep(ctx, wait) != nil {
				return nil
			}
			continue
		}
		if failing {
			p.log.Info("eventsink: publishing again")
			failing = false
		}
		bo.Reset()
		if !more {
			if p.sleep(ctx, p.cfg.Poll) != nil {
				return nil
			}
		}
	}
	return nil
}

// sleep waits d, or less when ownership changes.
func (p *Publisher) sleep(ctx context.Context, d time.Duration) error {
	t := p.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	case <-p.changed:
	}
	return nil
}

// pending is the page in hand while its publish fails, published again by
// the next step before anything new is read.
type pending struct {
	msgs []Message
}

// step runs one poll: (re)load the state when ownership changed, keep
// the cursors touched, read the new events and the open gaps, publish what
// this node owns, advance the cursors. more reports a full page (read
// again at once).
func (p *Publisher) step(ctx context.Context) (more bool, err error) {
	if p.cursors == nil || p.dirty.Load() {
		if err := p.reload(ctx); err != nil {
			return false, err
		}
	}
	now := p.clock.Now()
	if (p.moved && now.Sub(p.lastSave) >= p.cfg.SaveInterval) || now.Sub(p.lastSave) >= p.cfg.TouchInterval {
		if err := p.save(ctx); err != nil {
			return false, err
		}
	}
	if len(p.owned) == 0 && p.owned != nil {
		p.oldest.Store(0)
		return false, nil // nothing to publish until a partition is gained
	}
	if inHand := p.hand; inHand != nil {
		p.noteOldest(inHand.msgs)
		if err := p.cfg.Sink.Publish(ctx, inHand.msgs); err != nil {
			return false, fmt.Errorf("publish %d events: %w", len(inHand.msgs), err)
		}
		p.acked(inHand.msgs)
		p.hand = nil
		p.oldest.Store(0)
	}
	// Were the gaps' read to fail, the new page is read again next time:
	// it cannot be published before them.
	readBefore, gapsBefore := p.read, slices.Clone(p.gaps)
	var found []hourglass.EventRecord
	full := false
	if len(p.gaps) < p.cfg.MaxGaps {
		page, err := p.cfg.Log.Events(ctx, hourglass.EventPage{After: p.read, Limit: p.cfg.Batch})
		if err != nil {
			return false, fmt.Errorf("read events after %d: %w", p.read, err)
		}
		full = len(page) == p.cfg.Batch
		next := p.read + 1
		for i, e := range page {
			if e.Seq > next {
				if len(p.gaps) == p.cfg.MaxGaps {
					// No room to remember this hole: stop before it,
					// and read from there once gaps settle.
					page, full = page[:i], false
					break
				}
				p.gaps = append(p.gaps, gap{from: next, to: e.Seq - 1, seen: now})
			}
			next = e.Seq + 1
		}
		if n := len(page); n > 0 {
			p.read = page[n-1].Seq
		}
		found = page
	} else {
		p.log.Warn("eventsink: too many gaps in the event seqs; reading no new events until they settle", "gaps", len(p.gaps), "max", p.cfg.MaxGaps)
	}
	// The gaps are read after the new events: an event that filled one
	// before a later event of its order was read is found now.
	filled, err := p.fillGaps(ctx, now)
	if err != nil {
		p.read, p.gaps = readBefore, gapsBefore
		return false, err
	}
	found = append(found, filled...)
	slices.SortFunc(found, func(a, b hourglass.EventRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	msgs := make([]Message, 0, len(found))
	for _, e := range found {
		part := hourglass.PartitionOf(e.OrderID)
		if p.mask&(1<<uint(part)) == 0 || e.Seq <= p.cursors[part] {
			continue
		}
		msgs = append(msgs, messageOf(e, part))
	}
	if len(msgs) > 0 {
		p.noteOldest(msgs)
		if err := p.cfg.Sink.Publish(ctx, msgs); err != nil {
			p.hand = &pending{msgs: msgs}
			return false, fmt.Errorf("publish %d events: %w", len(msgs), err)
		}
		p.acked(msgs)
	}
	switch {
	case !full:
		p.oldest.Store(0) // caught up
	case len(msgs) > 0:
		// More to read: the next event is at most this old.
		p.oldest.Store(msgs[len(msgs)-1].CreatedAt.UnixNano())
	}
	p.advance()
	return full, nil
}

// noteOldest records the oldest creation time of msgs as the lag's start.
func (p *Publisher) noteOldest(msgs []Message) {
	oldest := msgs[0].CreatedAt
	for _, m := range msgs[1:] {
		if m.CreatedAt.Before(oldest) {
			oldest = m.CreatedAt
		}
	}
	p.oldest.Store(oldest.UnixNano())
}

func (p *Publisher) acked(msgs []Message) {
	p.published.Add(int64(len(msgs)))
	p.obs.EventsPublished(p.cfg.Name, len(msgs))
}

// fillGaps reads every open gap again (neighbouring gaps in one range
// read, at most gapSpan seqs wide), narrows each to what is still missing,
// then lets go of what is left of the gaps first seen longer than Settle
// ago: an event committed before this read, however long the broker was
// down, is found. It returns the events found.
func (p *Publisher) fillGaps(ctx context.Context, now time.Time) ([]hourglass.EventRecord, error) {
	var found []hourglass.EventRecord
	span := int64(4 * p.cfg.Batch)
	var kept []gap
	for i := 0; i < len(p.gaps); {
		// A cluster: gaps i..j-1 within span seqs of the first.
		j := i + 1
		for j < len(p.gaps) && p.gaps[j].to-p.gaps[i].from < span {
			j++
		}
		from, to := p.gaps[i].from, p.gaps[j-1].to
		// One page holds the range's events: a gap wider than that (the
		// start of a log pruned before, a rolled-back batch) is read in
		// parts over the next polls (what is past the page stays a gap).
		page, err := p.cfg.Log.Events(ctx, hourglass.EventPage{After: from - 1, Until: to, Limit: int(min(to-from+1, 4*span))})
		if err != nil {
			p.gaps = append(kept, p.gaps[i:]...)
			return nil, fmt.Errorf("read events %d..%d: %w", from, to, err)
		}
		k := 0 // page's next event
		for _, g := range p.gaps[i:j] {
			for k < len(page) && page[k].Seq < g.from {
				k++ // seen before: between two gaps
			}
			next := g.from
			for ; k < len(page) && page[k].Seq <= g.to; k++ {
				if page[k].Seq > next {
					kept = append(kept, gap{from: next, to: page[k].Seq - 1, seen: g.seen})
				}
				next = page[k].Seq + 1
				found = append(found, page[k])
			}
			if next <= g.to {
				kept = append(kept, gap{from: next, to: g.to, seen: g.seen})
			}
		}
		i = j
	}
	p.gaps = slices.DeleteFunc(kept, func(g gap) bool { return now.Sub(g.seen) >= p.cfg.Settle })
	return found, nil
}

// advance moves the cursors of the owned partitions to the highest seq
// below every open gap: everything at or below it was read and published.
func (p *Publisher) advance() {
	w := p.read
	for _, g := range p.gaps {
		w = min(w, g.from-1)
	}
	for _, part := range p.parts() {
		if w > p.cursors[part] {
			p.cursors[part] = w
			p.moved = true
		}
	}
}

// parts returns the owned partitions.
func (p *Publisher) parts() []int {
	if p.owned != nil {
		return p.owned
	}
	all := make([]int, hourglass.Partitions)
	for i := range all {
		all[i] = i
	}
	return all
}

// reload starts over from the cursors of the partitions owned now: the
// publish in hand, the gaps and the read position are dropped (what they
// held is read again from the cursors). A partition owned before and
// after keeps its cursor in memory (saved first), so a change of other
// partitions publishes none of its events again.
func (p *Publisher) reload(ctx context.Context) error {
	p.dirty.Store(false)
	kept := map[int]int64{}
	if p.cursors != nil {
		if p.moved {
			if err := p.save(ctx); err != nil {
				p.dirty.Store(true)
				return err
			}
		}
		for _, part := range p.parts() {
			kept[part] = p.cursors[part]
		}
	}
	var owned hourglass.Parts
	if p.cfg.Ownership != nil {
		owned = slices.Clone(p.cfg.Ownership.Owned())
		if owned == nil {
			owned = hourglass.Parts{}
		}
	}
	cs, err := p.cfg.Log.SinkCursors(ctx, p.cfg.Name)
	if err != nil {
		p.dirty.Store(true)
		return fmt.Errorf("read cursors: %w", err)
	}
	p.owned, p.mask, p.hand, p.gaps = owned, owned.Mask(), nil, nil
	p.cursors = make(map[int]int64, hourglass.Partitions)
	for _, c := range cs {
		p.cursors[c.Part] = c.Seq
	}
	for part, seq := range kept {
		p.cursors[part] = max(p.cursors[part], seq)
	}
	p.read = -1
	for _, part := range p.parts() {
		if p.read < 0 || p.cursors[part] < p.read {
			p.read = p.cursors[part]
		}
	}
	p.read = max(p.read, 0)
	// A partition without a cursor gets one at once, at 0, so that the
	// pruner holds its events from now on.
	p.moved = len(cs) < len(p.parts())
	p.lastSave = time.Time{}
	p.log.Debug("eventsink: loaded cursors", "partitions", len(p.parts()), "from_seq", p.read)
	return nil
}

// save writes the owned partitions' cursors (touching them).
func (p *Publisher) save(ctx context.Context) error {
	parts := p.parts()
	cs := make([]hourglass.SinkCursor, len(parts))
	for i, part := range parts {
		cs[i] = hourglass.SinkCursor{Sink: p.cfg.Name, Part: part, Seq: p.cursors[part]}
	}
	now := p.clock.Now()
	if err := p.cfg.Log.SaveSinkCursors(ctx, cs, now); err != nil {
		return fmt.Errorf("save cursors: %w", err)
	}
	p.lastSave, p.moved = now, false
	return nil
}

// messageOf returns the message of an event of partition part.
func messageOf(e hourglass.EventRecord, part int) Message {
	return Message{ID: e.ID, Type: e.Type, Key: keyOf(e), Seq: e.Seq, Partition: part, CreatedAt: e.CreatedAt, Body: e.Body}
}

// keyOf returns an event's ordering key: a timer's key for timer.fired
// and "<source>:<key>" for source.closed and source.expiring (their
// bodies name them), else the order's id in decimal.
func keyOf(e hourglass.EventRecord) string {
	switch e.Type {
	case hourglass.EventTimerFired:
		var b struct {
			Timer struct {
				Key string `json:"key"`
			} `json:"timer"`
		}
		if json.Unmarshal(e.Body, &b) == nil && b.Timer.Key != "" {
			return b.Timer.Key
		}
	case hourglass.EventSourceClosed, hourglass.EventSourceExpiring:
		var b struct {
			Source string `json:"source"`
			Key    *int64 `json:"key"`
		}
		if json.Unmarshal(e.Body, &b) == nil && b.Source != "" && b.Key != nil {
			return b.Source + ":" + strconv.FormatInt(*b.Key, 10)
		}
	}
	return strconv.FormatInt(e.OrderID, 10)
}

// Redact returns a sink URL without its password (or NATS token) and
// without the values of query parameters that hold secrets (the rule of
// internal/redact: redact.SecretName): the sink's name in logs, metrics
// and the cursors. Its form (the password dropped, not masked; the query
// sorted) is older than internal/redact's and kept, for it is the cursors'
// key. An unparsable URL is returned as its scheme alone.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.Index(raw, "://"); i > 0 {
			return raw[:i] + "://…"
		}
		return "…"
	}
	if u.User != nil {
		_, hasPass := u.User.Password()
		switch {
		case u.Scheme == "nats" || u.Scheme == "tls" || u.User.Username() == "":
			u.User = nil // a bare user in a NATS URL is a token
		case hasPass:
			u.User = url.User(u.User.Username())
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if redact.SecretName(k) {
				q.Set(k, redact.Mask)
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

type nopObserver struct{}

func (nopObserver) EventsPublished(string, int) {}
func (nopObserver) EventSinkFailed(string)      {}

// Dial returns a Sink that connects with open at its first Publish, and
// again at the next after open failed: a broker that is down when the node
// starts delays its events, not the start. Its errors are open's and the
// opened Sink's.
func Dial(open func(ctx context.Context) (Sink, error)) Sink { return &dialed{open: open} }

type dialed struct {
	open func(ctx context.Context) (Sink, error)
	s    Sink
}

func (d *dialed) Publish(ctx context.Context, msgs []Message) error {
	if d.s == nil {
		s, err := d.open(ctx)
		if err != nil {
			return err
		}
		d.s = s
	}
	return d.s.Publish(ctx, msgs)
}

func (d *dialed) Close() error {
	if d.s == nil {
		return nil
	}
	return d.s.Close()
}
