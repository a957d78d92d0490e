// Package nats is the NATS JetStream delay mechanism. Timers are messages in
// one work-queue stream; one durable pull consumer hands each to the close
// path when it is due, and the message is acknowledged only after Deliver
// returned nil, so a crash anywhere redelivers instead of losing a timer.
//
// # How a timer travels
//
// Schedule publishes each timer (body: order id and deadline in ms) with
// Nats-Msg-Id = the id and the deadline, so a relay that publishes the same outbox row
// twice within the stream's duplicate window stores it once, and waits for
// every publish acknowledgement before returning.
//
//   - On servers with message schedules (2.12 and later, detected from the
//     server version and confirmed by the stream config the server echoes
//     back) a timer due more than ScheduleLead from now is published to
//     <ns>.part.<p>.sched.<order id> with "Nats-Schedule: @at <deadline minus
//     ScheduleLead, whole seconds>" and target <ns>.part.<p>.due: the server
//     itself keeps it out of the consumer until shortly before its deadline.
//   - Otherwise (NATS 2.9–2.11, or NoMsgSchedules) it is published straight
//     to <ns>.part.<p>.due.
//
// # Partitions
//
// Each partition p (hourglass.PartitionOf(order id)) has its own
// work-queue stream <ns>-timers-<p> (subjects <ns>.part.<p>.>), a timer is
// published to <ns>.part.<p>.due, and the stream's durable consumer
// <ns>-closer reads that subject. (One stream with a filtered consumer per
// partition cost the NATS 2.9 server three times the CPU of one consumer in
// a burst of 10,000 timers, and delivered them seconds late.) A process fetches from the
// consumers of the partitions it owns (Own; all 64 until told otherwise),
// so with several nodes each timer reaches the node whose engine closes it.
// When a partition is lost its fetcher stops and the messages of it this
// process holds are handed back (negatively acknowledged: at once if due,
// else with a delay that brings them back inside the hold window) for the
// new owner, which fetches from the same consumer.
//
// Earlier versions published to <ns>.timers.due in the stream <ns>-timers,
// read through its consumer <ns>-closer. Where that stream exists every
// process still reads that consumer and republishes what
// it finds to the timer's partition subject (acknowledging the original
// after the publish acknowledgement), so a rolling upgrade loses nothing.
//
// Run fetches from those consumers (explicit acks) and sorts each message
// by the time left until its deadline:
//
//   - due (deadline <= now): delivered at once;
//   - due within HoldWindow: held in memory on a local timer and delivered at
//     its exact millisecond; the message stays in progress on the server (its
//     AckWait is longer than the hold), so nothing is negatively acknowledged
//     for it;
//   - due later: negatively acknowledged once with a delay of the time left
//     minus NakLead, so the server redelivers it inside the hold window.
//
// Holding the near timers locally is what keeps the NATS 2.9 server usable:
// there every NakWithDelay resets the consumer's redelivery timer to 10 ms
// and acknowledgements in flight postpone its redelivery scan, so a consumer
// that nak'ed each not-yet-due message over and over (the naive design)
// stalls all redeliveries under a steady load. Here each timer is nak'ed at
// most once, and early enough (NakLead) that a late redelivery is absorbed
// by the hold. Negative acknowledgements are sent in bursts every NakPacing,
// off the fetch path, each with its delay computed when it is sent.
//
// A single goroutine holds the near timers in a min-heap and sleeps until the
// earliest deadline, so 10,000 timers due in one millisecond cost one wake-up.
//
// # Guarantees
//
// At-least-once: a message is acknowledged after Deliver returned nil;
// Deliver failing negatively acknowledges the batch with a backoff; a
// process that dies holding messages has them redelivered after AckWait.
// Never early: a timer is delivered only when the clock has reached its
// deadline, whatever the server does. Durable: the stream is file-backed, so
// timers accepted by Schedule survive this process and a server restart.
//
// # Failure behaviour
//
// The client reconnects by itself. Run returns an error when the connection
// has been down (or fetching has failed) for FailAfter, so the engine turns
// /readyz 503, sweeps the database, and restarts Run with backoff; each Run
// re-declares the stream and consumer. Schedule fails when acknowledgements do
// not arrive within PublishTimeout; the relay then retries, and duplicates are
// dropped by Nats-Msg-Id (or close a no-op).
package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
)

// Defaults of Config, applied to zero fields.
const (
	URLDefault            = natsgo.DefaultURL // nats://127.0.0.1:4222
	NamespaceDefault      = "hourglass"
	ReplicasDefault       = 1
	AckWaitDefault        = 30 * time.Second
	MaxAckPendingDefault  = 50_000
	HoldWindowDefault     = 10 * time.Second
	NakLeadDefault        = 5 * time.Second
	NakPacingDefault      = 100 * time.Millisecond
	ScheduleLeadDefault   = 2 * time.Second
	DuplicatesDefault     = 2 * time.Minute
	FetchBatchDefault     = 500
	FetchWaitDefault      = time.Second
	DeliverBatchDefault   = 512
	WorkersDefault        = 2
	FailAfterDefault      = 3 * time.Second
	ConnectTimeoutDefault = 5 * time.Second
	PublishTimeoutDefault = 10 * time.Second
	RetryMaxDefault       = 5 * time.Second
)

// Config configures a Scheduler. The zero value of each field means its
// default (the constants above).
type Config struct {
	// URL of the NATS server(s), comma-separated; user:password@ or a
	// token@ in the URL authenticate.
	URL string
	// Namespace prefixes the stream (<ns>-timers), the consumer
	// (<ns>-closer) and the subjects (<ns>.timers.>). Characters NATS does
	// not allow in names are replaced by "_".
	Namespace string
	// Clock is the source of "now" for every due/not-yet-due decision (a
	// timer is never delivered before Clock says its deadline passed);
	// waiting itself uses real timers.
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Replicas of the stream (1 on a single server; 3 in a cluster).
	Replicas int
	// AckWait is how long the server waits for an acknowledgement before it
	// redelivers a message: the redelivery delay after a consumer crashed.
	AckWait time.Duration
	// MaxAckPending caps the messages the consumer has out at once: held,
	// being delivered, and (before NATS 2.12) waiting out a delayed negative
	// acknowledgement. It must fit the timers due within HoldWindow (10,000
	// due in one millisecond need 10,000).
	MaxAckPending int
	// HoldWindow: a message due within it is held in memory until its
	// deadline. Must be below AckWait/2.
	HoldWindow time.Duration
	// NakLead: a message due later than HoldWindow is negatively acknowledged
	// with a delay of the time left minus NakLead. Must be below HoldWindow.
	NakLead time.Duration
	// NakPacing is how often buffered negative acknowledgements are sent.
	NakPacing time.Duration
	// ScheduleLead is how long before its deadline a message schedule
	// releases a timer (NATS 2.12+). Must be below HoldWindow.
	ScheduleLead time.Duration
	// NoMsgSchedules keeps timers off message schedules even where the server
	// supports them.
	NoMsgSchedules bool
	// Duplicates is the stream's deduplication window for Nats-Msg-Id.
	Duplicates time.Duration
	// FetchBatch and FetchWait size each pull request.
	FetchBatch int
	FetchWait  time.Duration
	// DeliverBatch is the most timers per Deliver call; Workers is how many
	// Deliver calls run at once.
	DeliverBatch int
	Workers      int
	// FailAfter is how long the connection may be down, or fetching fail,
	// before Run returns an error.
	FailAfter time.Duration
	// ConnectTimeout bounds connecting and each start-up check.
	ConnectTimeout time.Duration
	// PublishTimeout bounds waiting for publish acknowledgements.
	PublishTimeout time.Duration
	// RetryMax caps the redelivery delay after failed deliveries.
	RetryMax time.Duration
}

func (c Config) withDefaults() Config {
	c.URL = cmp.Or(c.URL, URLDefault)
	c.Namespace = cmp.Or(c.Namespace, NamespaceDefault)
	if c.Clock == nil {
		c.Clock = hourglass.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Replicas = cmp.Or(c.Replicas, ReplicasDefault)
	c.AckWait = cmp.Or(c.AckWait, AckWaitDefault)
	c.MaxAckPending = cmp.Or(c.MaxAckPending, MaxAckPendingDefault)
	c.HoldWindow = cmp.Or(c.HoldWindow, HoldWindowDefault)
	c.NakLead = cmp.Or(c.NakLead, NakLeadDefault)
	c.NakPacing = cmp.Or(c.NakPacing, NakPacingDefault)
	c.ScheduleLead = cmp.Or(c.ScheduleLead, ScheduleLeadDefault)
	c.Duplicates = cmp.Or(c.Duplicates, DuplicatesDefault)
	c.FetchBatch = cmp.Or(c.FetchBatch, FetchBatchDefault)
	c.FetchWait = cmp.Or(c.FetchWait, FetchWaitDefault)
	c.DeliverBatch = cmp.Or(c.DeliverBatch, DeliverBatchDefault)
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.FailAfter = cmp.Or(c.FailAfter, FailAfterDefault)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, ConnectTimeoutDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	return c
}

// Validate reports the first setting out of its allowed range, after
// defaults are applied. It is pure and safe for concurrent use.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("nats: replicas must be between 1 and 5, got %d", c.Replicas)
	case c.AckWait < time.Second:
		return fmt.Errorf("nats: ack wait must be at least 1s, got %s", c.AckWait)
	case c.HoldWindow >= c.AckWait/2:
		return fmt.Errorf("nats: hold window (%s) must be below half the ack wait (%s)", c.HoldWindow, c.AckWait)
	case c.NakLead <= 0 || c.NakLead >= c.HoldWindow:
		return fmt.Errorf("nats: nak lead must be between 0 and the hold window (%s), got %s", c.HoldWindow, c.NakLead)
	case c.ScheduleLead <= 0 || c.ScheduleLead+time.Second >= c.HoldWindow:
		return fmt.Errorf("nats: schedule lead must be above 0 and at least 1s below the hold window (%s), got %s", c.HoldWindow, c.ScheduleLead)
	case c.NakPacing <= 0 || c.NakPacing > time.Second:
		return fmt.Errorf("nats: nak pacing must be between 0 and 1s, got %s", c.NakPacing)
	case c.MaxAckPending < c.FetchBatch:
		return fmt.Errorf("nats: max ack pending (%d) must be at least the fetch batch (%d)", c.MaxAckPending, c.FetchBatch)
	case c.FetchBatch < 1 || c.DeliverBatch < 1 || c.Workers < 1:
		return fmt.Errorf("nats: fetch batch, deliver batch and workers must be at least 1")
	case c.FetchWait < 100*time.Millisecond || c.FetchWait > 10*time.Second:
		return fmt.Errorf("nats: fetch wait must be between 100ms and 10s, got %s", c.FetchWait)
	case c.Duplicates < time.Second:
		return fmt.Errorf("nats: duplicates window must be at least 1s, got %s", c.Duplicates)
	}
	return nil
}

// Scheduler is the NATS JetStream delay mechanism. Its methods are safe for
// concurrent use, except that only one Run may be active at a time.
type Scheduler struct {
	cfg   Config
	log   *slog.Logger
	clock hourglass.Clock
	names names
	url   string // redacted, for messages
	nc    *natsgo.Conn
	js    jetstream.JetStream

	// schedules is whether Schedule uses message schedules; it is decided
	// from the server version and the stream config the server echoes.
	schedules atomic.Bool
	running   atomic.Bool
	// owned is the mask of the partitions this process fetches
	// (hourglass.Parts.Mask; -1: every partition).
	owned atomic.Int64

	mu  sync.Mutex
	cur *run // the active Run, for Pending
	// opened is what Open declared, for the first Run to use instead of
	// declaring the 64 streams again; later Runs declare (a stream may
	// have been deleted meanwhile).
	opened *consumers
}

var (
	_ hourglass.Scheduler   = (*Scheduler)(nil)
	_ hourglass.Partitioned = (*Scheduler)(nil)
)

// Open connects to NATS, checks that JetStream is enabled for the account,
// and creates or updates the stream and the durable consumer. It returns a
// one-line error saying what to fix when the server is unreachable, refuses
// the credentials, has no JetStream, or refuses the stream. Opening again
// with the same namespace is idempotent: it reuses the stream and consumer
// (and their timers).
func Open(ctx context.Context, cfg Config) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:   cfg,
		log:   cfg.Logger.With("delay", "nats"),
		clock: cfg.Clock,
		names: namesFor(cfg.Namespace),
		url:   redact.URL(cfg.URL),
	}
	s.owned.Store(-1)
	nc, err := natsgo.Connect(cfg.URL,
		natsgo.Name("hourglass "+s.names.consumer),
		natsgo.Timeout(cfg.ConnectTimeout),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250*time.Millisecond),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err == nil {
				return // our own Close
			}
			s.log.Warn("nats: disconnected; reconnecting", "url", s.url, "err", err)
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			s.log.Info("nats: reconnected", "url", s.url, "server_version", nc.ConnectedServerVersion())
			if s.schedules.Load() && !supportsSchedules(nc.ConnectedServerVersion()) {
				s.log.Warn("nats: the server no longer supports message schedules; publishing timers directly", "server_version", nc.ConnectedServerVersion())
				s.schedules.Store(false)
			}
		}),
	)
	if err != nil {
		return nil, connectError(s.url, err)
	}
	s.nc = nc
	s.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(4*publishChunk),
		jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout),
	)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream context: %w", err)
	}
	opCtx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if _, err := s.js.AccountInfo(opCtx); err != nil {
		nc.Close()
		return nil, jetStreamError(s.url, err)
	}
	if s.opened, err = s.ensure(opCtx); err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

// Own implements hourglass.Partitioned: this process fetches only from the
// consumers of parts (nil: every partition) from now on, and hands back the
// messages of the others it holds. It does not block; safe for concurrent
// use, idempotent.
func (s *Scheduler) Own(parts hourglass.Parts) {
	s.owned.Store(parts.Mask())
	s.mu.Lock()
	r := s.cur
	s.mu.Unlock()
	if r != nil {
		r.reown()
	}
}

// owns reports whether this process fetches the partition of id.
func (s *Scheduler) owns(id int64) bool {
	return s.owned.Load()>>hourglass.PartitionOf(id)&1 == 1
}

// Info implements hourglass.Scheduler.
// ReclaimHorizon implements hourglass.Reclaiming: a process that dies
// holds the messages it fetched (due within HoldWindow, and nak'ed ones
// until their redelivery) until the server redelivers them, AckWait after
// their delivery; the new owner of their partition schedules its deadlines
// within AckWait again.
func (s *Scheduler) ReclaimHorizon() time.Duration { return s.cfg.AckWait }

var _ hourglass.Reclaiming = (*Scheduler)(nil)

func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "nats", Feed: hourglass.FeedOutbox, Durable: true}
}

// MsgSchedules reports whether Schedule currently publishes timers as
// NATS message schedules (servers 2.12 and later). Safe for concurrent use.
func (s *Scheduler) MsgSchedules() bool { return s.schedules.Load() }

// Pending returns the number of timers this process holds in memory (due
// within HoldWindow, or due and waiting for Deliver); the rest wait in the
// stream. Safe for concurrent use.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	r := s.cur
	s.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.pending()
}

// consumers are a namespace's durable consumers: the one of each
// partition's stream, and (nil when that stream does not exist) the one of
// the unpartitioned stream of earlier versions.
type consumers struct {
	parts  [hourglass.Partitions]jetstream.Consumer
	legacy jetstream.Consumer
}

// ensure creates or updates the partitions' streams and their durable
// consumers, decides whether timers go through message schedules, and
// returns the consumers, with the unpartitioned stream's consumer if that
// stream exists (it is never created). The 64 partitions are declared at
// once: one after the other they would delay the first fetch by 128 round
// trips. Idempotent.
func (s *Scheduler) ensure(ctx context.Context) (*consumers, error) {
	version := s.nc.ConnectedServerVersion()
	want := !s.cfg.NoMsgSchedules && supportsSchedules(version)
	var out consumers
	errs := make([]error, hourglass.Partitions+1)
	enabled := make([]bool, hourglass.Partitions)
	var wg sync.WaitGroup
	for p := range out.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := s.names.partStream(p)
			cfg := s.streamConfig(stream, s.names.partSubjects(p), want)
			if existing, err := s.js.Stream(ctx, stream); err == nil && existing.CachedInfo().Config.AllowMsgSchedules {
				// A server refuses to turn message schedules off again; leave the
				// stream as it is (NoMsgSchedules only stops using them).
				cfg.AllowMsgSchedules, cfg.AllowRollup = true, true
			}
			st, err := s.js.CreateOrUpdateStream(ctx, cfg)
			if err != nil {
				errs[p] = fmt.Errorf("nats: create or update stream %s (subjects %s) on %s: %w", stream, cfg.Subjects[0], s.url, err)
				return
			}
			// A server that does not know message schedules drops the
			// field from the config it echoes (and would ignore the
			// headers): trust the echo.
			enabled[p] = st.CachedInfo().Config.AllowMsgSchedules
			out.parts[p], errs[p] = s.consumer(ctx, st, s.names.partDue(p), "hourglass: delivers due order deadlines of partition "+strconv.Itoa(p)+" to the close path")
		}()
	}
	if st, err := s.js.Stream(ctx, s.names.stream); err == nil {
		out.legacy, errs[hourglass.Partitions] = s.consumer(ctx, st, s.names.due, "hourglass: moves the timers earlier versions published to their partitions")
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		errs[hourglass.Partitions] = fmt.Errorf("nats: look up stream %s on %s: %w", s.names.stream, s.url, err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	got := want && !slices.Contains(enabled, false)
	if want && !got {
		s.log.Warn("nats: the server did not enable message schedules on the streams; publishing timers directly", "server_version", version)
	}
	if s.schedules.Swap(got) != got {
		s.log.Info("nats: timer publishing mode", "msg_schedules", got, "server_version", version)
	}
	return &out, nil
}

// consumer creates or updates the durable consumer of st reading subject.
func (s *Scheduler) consumer(ctx context.Context, st jetstream.Stream, subject, what string) (jetstream.Consumer, error) {
	name := s.names.consumer
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       name,
		Description:   what,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: s.cfg.MaxAckPending,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("nats: create or update consumer %s on stream %s: %w", name, st.CachedInfo().Config.Name, err)
	}
	return cons, nil
}

func (s *Scheduler) streamConfig(name, subjects string, schedules bool) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: "hourglass: pending order deadlines of one partition (delay mechanism nats)",
		Subjects:    []string{subjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    s.cfg.Replicas,
		Discard:     jetstream.DiscardOld,
		Duplicates:  s.cfg.Duplicates,
		// Message schedules replace a subject's previous schedule by a
		// roll-up, which the stream must allow.
		AllowMsgSchedules: schedules,
		AllowRollup:       schedules,
	}
}

// publishChunk is how many publishes Schedule has in flight before it waits
// for their acknowledgements.
const publishChunk = 1000

// Schedule implements hourglass.Scheduler: it publishes the timers to their
// partitions' subjects (with Nats-Msg-Id = id@deadline) and returns once the server acknowledged every one
// as stored. On error some may be stored: publishing them again is safe
// (deduplicated within the Duplicates window, a no-op close after it). Safe
// for concurrent use.
func (s *Scheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	return s.publish(ctx, timers, "")
}

// Reclaim implements hourglass.Reclaiming: Schedule, each message's
// Nats-Msg-Id with "@r" and the time of the call added, so the duplicate
// window does not drop it as the copy a dead node holds (published with the
// same id and deadline moments before) until AckWait.
func (s *Scheduler) Reclaim(ctx context.Context, timers []hourglass.DueItem) error {
	return s.publish(ctx, timers, "@r"+strconv.FormatInt(s.clock.Now().UnixNano(), 10))
}

// publish publishes timers, each with idSuffix added to its Nats-Msg-Id
// (timerMsg), and waits for every acknowledgement.
func (s *Scheduler) publish(ctx context.Context, timers []hourglass.DueItem, idSuffix string) error {
	now := s.clock.Now()
	schedules := s.schedules.Load()
	for start := 0; start < len(timers); start += publishChunk {
		chunk := timers[start:min(start+publishChunk, len(timers))]
		futures := make([]jetstream.PubAckFuture, 0, len(chunk))
		for _, t := range chunk {
			msg, opts := s.timerMsg(t, now, schedules, idSuffix)
			f, err := s.js.PublishMsgAsync(msg, opts...)
			if err != nil {
				return fmt.Errorf("nats: publish timer of order %d: %w", t.ID, err)
			}
			futures = append(futures, f)
		}
		for i, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("nats: publish timer of order %d to stream %s: %w", chunk[i].ID, s.names.partStream(hourglass.PartitionOf(chunk[i].ID)), err)
			case <-ctx.Done():
				return fmt.Errorf("nats: wait for publish acknowledgements: %w", ctx.Err())
			}
		}
	}
	return nil
}

// timerMsg builds the message for t: a message schedule when schedules is
// set and t is due later than ScheduleLead plus a second, else a message on
// its partition's due subject. idSuffix is added to the Nats-Msg-Id.
func (s *Scheduler) timerMsg(t hourglass.DueItem, now time.Time, schedules bool, idSuffix string) (*natsgo.Msg, []jetstream.PublishOpt) {
	p := hourglass.PartitionOf(t.ID)
	due := s.names.partDue(p)
	msg := natsgo.NewMsg(due)
	msg.Data = encodeTimer(t)
	opts := []jetstream.PublishOpt{
		// The id and the deadline: a client timer re-armed to another time
		// is a new message, not a duplicate of the first.
		jetstream.WithMsgID(strconv.FormatInt(t.ID, 10) + "@" + strconv.FormatInt(hourglass.UnixMilli(t.At), 10) + idSuffix),
		jetstream.WithExpectStream(s.names.partStream(p)),
	}
	if at, ok := scheduleAt(now, t.At, s.cfg.ScheduleLead); schedules && ok {
		msg.Subject = s.names.partSchedSubject(p, t.ID)
		opts = append(opts, jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget(due))
	}
	return msg, opts
}

// Destroy deletes the namespace's streams (the 64 partitions' and the
// unpartitioned one of earlier versions), with their consumers and every
// timer in them: for tests and for retiring a namespace. It opens a
// connection of its own, so it works before or after Close. Idempotent.
// Other processes on the namespace lose their consumers (their Run returns
// an error) and recreate the streams when they run again.
func (s *Scheduler) Destroy(ctx context.Context) error {
	nc, err := natsgo.Connect(s.cfg.URL, natsgo.Name("hourglass "+s.names.consumer+" destroy"), natsgo.Timeout(s.cfg.ConnectTimeout))
	if err != nil {
		return fmt.Errorf("nats: destroy: %w", connectError(s.url, err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: destroy: %w", err)
	}
	streams := []string{s.names.stream}
	for p := range hourglass.Partitions {
		streams = append(streams, s.names.partStream(p))
	}
	for _, st := range streams {
		if err := js.DeleteStream(ctx, st); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("nats: destroy: delete stream %s: %w", st, err)
		}
	}
	return nil
}

// Close closes the connection after flushing what is buffered (at most
// ConnectTimeout). Run must have returned. Idempotent.
func (s *Scheduler) Close() error {
	if s.nc.IsClosed() {
		return nil
	}
	if s.nc.IsConnected() {
		_ = s.nc.FlushTimeout(s.cfg.ConnectTimeout)
	}
	s.nc.Close()
	return nil
}

// connectError turns a connect failure into one line saying what to fix.
func connectError(u string, err error) error {
	switch {
	case errors.Is(err, natsgo.ErrAuthorization), errors.Is(err, natsgo.ErrAuthExpired), errors.Is(err, natsgo.ErrAuthRevoked):
		return fmt.Errorf("nats: %s refused the credentials (%v); check the user:password@ or token@ in --nats-url", u, err)
	case errors.Is(err, natsgo.ErrNoServers):
		return fmt.Errorf("nats: cannot reach %s (%v); start nats-server with JetStream (-js) or fix --nats-url", u, err)
	}
	return fmt.Errorf("nats: connect to %s: %w; check --nats-url", u, err)
}

// jetStreamError turns an AccountInfo failure into one line.
func jetStreamError(u string, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return fmt.Errorf("nats: JetStream is not enabled on the server at %s; start nats-server with -js (and a -sd store directory)", u)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("nats: JetStream is not enabled for this account at %s; enable it in the account's config", u)
	}
	return fmt.Errorf("nats: check JetStream at %s: %w", u, err)
}
