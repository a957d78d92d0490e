// Package webhook delivers hourglass's order events to subscribed HTTP
// endpoints: signed POSTs (Sign), at least once, in order per order, retried
// with exponential backoff and jitter, and moved to a dead-letter list after
// the last attempt.
//
// The queue is the database (hourglass.DeliveryStore): every event writes one
// pending delivery per matching webhook in its own transaction, with the
// time it is due. Attempts are timed like order deadlines, by the same code:
// the timing wheel on the shared in-memory timing loop (package timing/timerloop),
// keyed by delivery id, fed by the shared window loader (package window):
// only deliveries due within Config.Window, and at most Config.MaxHeld of
// them, are held in memory, paged in from the database every
// Config.LoadInterval (and as a backlog drains), and new ones are read as
// soon as the store says it created some. With several nodes the loader
// follows the partitions this node owns, as the engine's does. A restart
// (even after kill -9) loses nothing: every pending delivery and its next
// attempt time is a row, loaded again on start; an attempt in flight at the
// crash is sent again.
//
// Each attempt re-reads its delivery, so a timer that is stale (the
// delivery was delivered, rescheduled, killed or its webhook deleted) does
// nothing, and an attempt's outcome is recorded with a compare-and-set on
// the attempt count. The reads the workers ask for while one is in flight
// are made together, with those of the deliveries next in the queue (see
// reader: a row read ahead serves one attempt, for at most 500 ms, and
// never outlives an outcome of its delivery on this node), and the stores
// group-commit the records.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/timing/dispatch"
	"github.com/hourglass/hourglass/timing/timerloop"
	"github.com/hourglass/hourglass/timing/wait"
	"github.com/hourglass/hourglass/timing/window"
)

// Defaults of Config.
const (
	JitterDefault       = 0.2
	TimeoutDefault      = 10 * time.Second
	WorkersDefault      = 16
	WindowDefault       = 2 * time.Minute
	LoadIntervalDefault = 30 * time.Second
	PollIntervalDefault = time.Second
	LoadPageSizeDefault = 1000
	// StoreRetryDefault is how long an attempt waits after a database error
	// before it tries again.
	StoreRetryDefault = time.Second
	// MaxRetries is the most entries a retry schedule may have.
	MaxRetries = 20
	// MaxWebhooksDefault is how many webhooks may exist at once.
	MaxWebhooksDefault = 100
	// MaxWebhooksLimit is the largest MaxWebhooks accepted: each event
	// writes one delivery per subscribed webhook in the order's own
	// transaction, so this bounds that transaction's cost.
	MaxWebhooksLimit = 10000
	// MaxHeldDefault is Config.MaxHeld's default: about 1 MB of memory.
	MaxHeldDefault = 10000
	// ScanLagDefault is how far back the new-delivery scan looks: a
	// delivery is due at its event's commit time, and a transaction may
	// commit (and become visible) up to this long after it read that time.
	ScanLagDefault = 10 * time.Second
)

// RetryDefault is the default retry schedule: after a failed first attempt,
// try again 1, 2 and 4 minutes later (each ± jitter), then give up.
func RetryDefault() []time.Duration {
	return []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute}
}

// Outcomes of an attempt, as reported to the Observer.
const (
	OutcomeDelivered = "delivered" // 2xx: done
	OutcomeRetry     = "retry"     // failed; another attempt is scheduled
	OutcomeDead      = "dead"      // failed its last attempt; now a dead letter
	// OutcomeUnrecorded: made, but the store refused to record its outcome.
	// It still counts against the delivery's retry schedule (see
	// Service.attempt), so a store that refuses every record still sees the
	// delivery end in a dead letter, or a record retried, not a resend.
	OutcomeUnrecorded = "unrecorded"
)

// LagObserver is an optional interface of an Observer: it is told, at a
// delivery's first attempt, how long after its event's commit that attempt
// started (hourglass_webhook_delivery_lag_seconds). A dead letter retried
// by hand starts again at attempt one and counts its whole age.
type LagObserver interface {
	WebhookDeliveryLag(d time.Duration)
}

// Observer receives what the engine does, for metrics. It must be safe for
// concurrent use.
type Observer interface {
	// WebhookAttempted is called once per recorded attempt with its
	// outcome, and once per attempt whose record failed with
	// OutcomeUnrecorded.
	WebhookAttempted(outcome string)
}

// Store is what the service needs of the database.
type Store interface {
	hourglass.WebhookStore
	hourglass.DeliveryStore
}

// Config configures a Service. The zero value of each field means its
// default.
type Config struct {
	// Allow lists the hosts webhooks may target. The zero AllowList allows
	// none: every webhook create is refused with a message saying so.
	Allow AllowList
	// AllowPrivate lets a host matched only by a wildcard entry resolve to
	// private addresses (see AllowList); exact entries may regardless.
	AllowPrivate bool
	// Retry is the delay before each retry: len(Retry) retries after the
	// first attempt, then the delivery is dead (default RetryDefault()).
	// Each delay is varied by ±Jitter.
	Retry []time.Duration
	// Jitter is the fraction each retry delay is varied by, uniformly, so
	// that a receiver's outage does not end with a burst (default 0.2; a
	// negative value means none).
	Jitter float64
	// Timeout bounds one attempt: connecting, sending and the response
	// headers (default 10 s). A timeout is a failure.
	Timeout time.Duration
	// Workers is how many attempts run at once (default 16).
	Workers int
	// Window is how far ahead due deliveries are held in memory; LoadInterval
	// how often the next window is paged in (must be less than Window).
	Window, LoadInterval time.Duration
	// PollInterval is how often the database is checked for new deliveries
	// in case a wake-up from the store was missed (default 1 s).
	PollInterval time.Duration
	// StoreRetry is the wait after a database error (default 1 s).
	StoreRetry time.Duration
	// MaxWebhooks is how many webhooks may exist (default 100); a create
	// beyond it is refused with limit_exceeded.
	MaxWebhooks int
	// ScanLag is how far behind now the new-delivery scan starts (default
	// ScanLagDefault).
	ScanLag time.Duration
	// MaxHeld bounds the deliveries held in memory (scheduled or in
	// flight; default MaxHeldDefault). When more are due within Window,
	// the loader holds the earliest MaxHeld and pages in more as they
	// drain, so a backlog of millions costs memory for MaxHeld.
	MaxHeld  int
	Clock    hourglass.Clock
	Logger   *slog.Logger
	Observer Observer
	// Ownership divides the deliveries among the nodes sharing the
	// database (package cluster): a node loads and sends only those of
	// orders in the partitions it owns, loads a partition's pending
	// deliveries when it gains it, and drops those of a partition it lost.
	// Nil: every delivery. (Events are pruned by package retention.)
	Ownership cluster.Ownership
	// Yield, when set, says whether deliveries should wait for more urgent
	// work of this process: the engine's close path working through a
	// burst (engine.Closing), which needs the CPU and the database more
	// than notifications do. An attempt starts once Yield returns false, or
	// after YieldMax of waiting, so a close path that is never idle slows
	// deliveries but cannot stop them.
	Yield func() bool
	// Transport overrides the HTTP transport (tests). By default a
	// transport whose dialer enforces Allow on the address dialled, with no
	// proxy.
	Transport http.RoundTripper
}

// Validate reports a configuration error, naming the field and its range.
func (c Config) Validate() error {
	if len(c.Retry) > MaxRetries {
		return fmt.Errorf("webhook: Retry has %d delays; at most %d", len(c.Retry), MaxRetries)
	}
	for i, d := range c.Retry {
		if d < time.Millisecond || d > 24*time.Hour {
			return fmt.Errorf("webhook: Retry[%d] must be between 1ms and 24h, got %s", i, d)
		}
	}
	if c.Jitter > 1 {
		return fmt.Errorf("webhook: Jitter must be at most 1, got %g", c.Jitter)
	}
	check := func(name string, d, lo, hi time.Duration) error {
		if d != 0 && (d < lo || d > hi) {
			return fmt.Errorf("webhook: %s must be between %s and %s, got %s", name, lo, hi, d)
		}
		return nil
	}
	for _, err := range []error{
		check("Timeout", c.Timeout, time.Millisecond, 10*time.Minute),
		check("Window", c.Window, 100*time.Millisecond, 24*time.Hour),
		check("LoadInterval", c.LoadInterval, 10*time.Millisecond, 12*time.Hour),
		check("PollInterval", c.PollInterval, time.Millisecond, time.Hour),
		check("StoreRetry", c.StoreRetry, time.Millisecond, time.Hour),
	} {
		if err != nil {
			return err
		}
	}
	if c.MaxHeld < 0 {
		return fmt.Errorf("webhook: MaxHeld must not be negative, got %d", c.MaxHeld)
	}
	if c.MaxWebhooks < 0 || c.MaxWebhooks > MaxWebhooksLimit {
		return fmt.Errorf("webhook: MaxWebhooks must be 0..%d, got %d", MaxWebhooksLimit, c.MaxWebhooks)
	}
	if c.Workers < 0 || c.Workers > 1024 {
		return fmt.Errorf("webhook: Workers must be 0..1024, got %d", c.Workers)
	}
	if w, l := cmp.Or(c.Window, WindowDefault), cmp.Or(c.LoadInterval, LoadIntervalDefault); l >= w {
		return fmt.Errorf("webhook: LoadInterval (%s) must be less than Window (%s)", l, w)
	}
	return nil
}

// Service manages webhooks and dead letters (the API's side) and delivers
// events (Run). All methods are safe for concurrent use; Run is called once.
type Service struct {
	cfg    Config
	store  Store
	clock  hourglass.TimerClock
	log    *slog.Logger
	obs    Observer
	client *http.Client

	// sched times delivery attempts: the timing wheel on the shared
	// in-memory timing loop (package timerloop), whose dispatcher runs
	// Workers attempts at once; loader feeds it the deliveries due within
	// Window (package window), at most MaxHeld of them.
	sched  *timerloop.Scheduler
	loader *window.Loader
	// reads coalesces the attempts' reads of their rows (see reader).
	reads *reader

	mu   sync.Mutex
	busy map[int64]bool // being attempted: never attempted twice at once
	// timed holds, for each delivery handed to sched (in the wheel, or
	// fired and waiting for a worker), the earliest time it was handed
	// over for, until a worker takes it. An offer no earlier is dropped:
	// the scan offers again every row due in its ScanLag, and in a backlog
	// those rows wait for a worker; timed a second time, each would be
	// read a second time, after its first attempt resolved it.
	timed map[int64]int64
	// again holds, for a busy delivery, a time schedule was asked for while
	// it was busy: its attempt may have read the database just before the
	// change that asked (a blocking delivery resolved, a dead letter retried).
	again   map[int64]int64
	scanned int64 // unix ms: the new-delivery scan read everything due up to here, as of ScanLag ago
	// unrecorded holds, per delivery, the attempts made that the store
	// refused to record (see attempt); at most MaxHeld entries.
	unrecorded map[int64]*unrecorded
	// records holds a token per record waiting for its commit, and
	// recording counts them (see deliverOne).
	records   chan struct{}
	recording sync.WaitGroup

	// parts follows the partitions owned and those gained whose pending
	// deliveries the loader must load.
	parts *cluster.Tracker
}

// New returns a service over store; it delivers nothing until Run.
func New(store Store, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Retry) == 0 {
		cfg.Retry = RetryDefault()
	}
	cfg.Retry = append([]time.Duration(nil), cfg.Retry...)
	switch {
	case cfg.Jitter == 0:
		cfg.Jitter = JitterDefault
	case cfg.Jitter < 0:
		cfg.Jitter = 0
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	cfg.Workers = cmp.Or(cfg.Workers, WorkersDefault)
	cfg.Window = cmp.Or(cfg.Window, WindowDefault)
	cfg.LoadInterval = cmp.Or(cfg.LoadInterval, LoadIntervalDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.StoreRetry = cmp.Or(cfg.StoreRetry, StoreRetryDefault)
	cfg.MaxWebhooks = cmp.Or(cfg.MaxWebhooks, MaxWebhooksDefault)
	cfg.ScanLag = cmp.Or(cfg.ScanLag, ScanLagDefault)
	cfg.MaxHeld = cmp.Or(cfg.MaxHeld, MaxHeldDefault)
	s := &Service{cfg: cfg, store: store, clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger, obs: cfg.Observer}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	transport := cfg.Transport
	if transport == nil {
		dialer := newDialer(cfg.Allow, cfg.AllowPrivate, cfg.Timeout)
		transport = &http.Transport{
			Proxy:             nil, // a proxy would dial for us, past the address check
			DialContext:       dialer.DialContext,
			ForceAttemptHTTP2: true,
			// Every worker may be sending to the same receiver: keeping
			// fewer idle connections per host than workers closes and
			// redials the rest after each round.
			MaxIdleConns:          max(100, cfg.Workers),
			MaxIdleConnsPerHost:   cfg.Workers,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
		}
	}
	s.client = &http.Client{
		Transport: transport,
		Timeout:   cfg.Timeout,
		// A redirect is a failure: following it could leave the allow-list.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.busy = map[int64]bool{}
	s.timed = map[int64]int64{}
	s.records = make(chan struct{}, recordsPerWorker*cfg.Workers)
	s.again = map[int64]int64{}
	s.unrecorded = map[int64]*unrecorded{}
	// One attempt per dispatch: each is an HTTP call of up to Timeout.
	s.sched = timerloop.NewWheel(timerloop.Config{Clock: s.clock, Logger: s.log, Dispatch: dispatch.Config{Workers: cfg.Workers, Batch: 1}})
	s.reads = newReader(store, s.clock, cfg.Workers, s.sched.Upcoming)
	s.parts = cluster.Track(cfg.Ownership, func() {
		if s.loader != nil {
			s.loader.Wake()
		}
	})
	s.loader = window.New(window.Config{
		Name:         "webhook",
		Sources:      []window.Source{s.dueDeliveries},
		Sink:         s.time,
		Window:       cfg.Window,
		LoadInterval: cfg.LoadInterval,
		PageSize:     LoadPageSizeDefault,
		MaxHeld:      cfg.MaxHeld,
		Held:         s.held,
		Parts:        s.parts,
		RetryMax:     cfg.StoreRetry,
		Clock:        s.clock,
		Logger:       s.log,
	})
	return s, nil
}

type nopObserver struct{}

func (nopObserver) WebhookAttempted(string) {}

// Retry returns the retry schedule in use (before jitter).
func (s *Service) Retry() []time.Duration { return append([]time.Duration(nil), s.cfg.Retry...) }

// CreateWebhook checks p (hourglass.WebhookParams.Validate, then the
// allow-list) and stores it. Errors: invalid_argument, naming the field, and
// for a host that is not allowed, the host.
func (s *Service) CreateWebhook(ctx context.Context, p hourglass.WebhookParams) (hourglass.Webhook, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Webhook{}, err
	}
	if err := s.cfg.Allow.CheckURL(p.URL); err != nil {
		return hourglass.Webhook{}, err
	}
	return s.store.CreateWebhook(ctx, p, s.cfg.MaxWebhooks)
}

// Webhooks returns a page of webhooks, by id.
func (s *Service) Webhooks(ctx context.Context, f hourglass.WebhookFilter) ([]hourglass.Webhook, error) {
	return s.store.Webhooks(ctx, f)
}

// Webhook returns one webhook. Errors: not_found.
func (s *Service) Webhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	return s.store.Webhook(ctx, id)
}

// DeleteWebhook removes a webhook, its pending deliveries and its dead
// letters, and returns it; an attempt in flight finishes but is not
// recorded. Errors: not_found.
func (s *Service) DeleteWebhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	w, err := s.store.DeleteWebhook(ctx, id)
	if err == nil {
		s.reads.dropAll() // its deliveries are gone
	}
	return w, err
}

// DeadLetters returns up to f.Limit dead letters that match f, after its
// cursor (hourglass.WebhookStore.DeadLetters).
func (s *Service) DeadLetters(ctx context.Context, f hourglass.DeadLetterFilter) ([]hourglass.DeadLetter, error) {
	return s.store.DeadLetters(ctx, f)
}

// RetryDeadLetter makes a dead letter pending again, due now, with its
// attempts reset (so it gets the whole retry schedule again), and schedules
// it. Later events of the same order to the same webhook that are still
// pending wait for it. Errors: not_found (no dead letter has that id).
func (s *Service) RetryDeadLetter(ctx context.Context, id int64) error {
	t, err := s.store.RetryDeadLetter(ctx, id)
	if err != nil {
		return err
	}
	s.reads.dropAll() // later events of its order now wait for it
	s.schedule(t, true)
	return nil
}

// Retried schedules dead letters that a bulk action made pending again
// (hourglass.BulkStore.ApplyBulk), as RetryDeadLetter schedules its one.
// Safe for concurrent use.
func (s *Service) Retried(ts []hourglass.DeliveryTimer) {
	s.reads.dropAll() // later events of their orders now wait for them
	for _, t := range ts {
		s.schedule(t, true)
	}
}

// DeleteDeadLetter removes a dead letter and returns it. Errors: not_found.
func (s *Service) DeleteDeadLetter(ctx context.Context, id int64) (hourglass.DeadLetter, error) {
	return s.store.DeleteDeadLetter(ctx, id)
}

// DeadLetterCount returns the number of dead letters.
func (s *Service) DeadLetterCount(ctx context.Context) (int, error) {
	_, dead, err := s.store.DeliveryCounts(ctx)
	return dead, err
}

// DeliveryCounts returns the number of pending deliveries and of dead letters.
func (s *Service) DeliveryCounts(ctx context.Context) (pending, dead int, err error) {
	return s.store.DeliveryCounts(ctx)
}

// Pending returns the number of deliveries held in memory (in the wheel or
// waiting for a worker).
func (s *Service) Pending() int {
	// The queue first: a delivery the timing loop moves from the wheel to
	// the queue between the two reads is counted once at most, never twice
	// (CI once sampled MaxHeld + a batch in transit).
	queued := s.sched.Queued()
	return s.sched.Pending() + queued
}

// held returns the deliveries held in memory: in the wheel, waiting for a
// worker, or being attempted.
func (s *Service) held() int {
	// The wheel, then the queue, then the workers, in the order a delivery
	// moves: one moving on between the reads may be counted twice, never
	// missed, so the loader that caps on this never loads past MaxHeld.
	n := s.sched.Pending()
	n += s.sched.Queued()
	s.mu.Lock()
	defer s.mu.Unlock()
	return n + len(s.busy)
}

// dueDeliveries is the loader's window.Source: pending deliveries as
// timers keyed by delivery id.
func (s *Service) dueDeliveries(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	page, err := s.store.DueDeliveries(ctx, hourglass.DueDeliveriesParams{After: p.After, AfterID: p.AfterID, Until: p.Until, Limit: p.Limit, Parts: p.Parts})
	if err != nil {
		return nil, err
	}
	return deliveryTimers(page), nil
}

func deliveryTimers(ds []hourglass.DeliveryTimer) []hourglass.DueItem {
	ts := make([]hourglass.DueItem, len(ds))
	for i, d := range ds {
		ts[i] = hourglass.DueItem{ID: d.ID, At: d.At}
	}
	return ts
}

// time hands timers to sched, but not those it holds already for the same
// time or earlier (see Service.timed). It is the loader's sink.
func (s *Service) time(ctx context.Context, timers []hourglass.DueItem) error {
	s.mu.Lock()
	keep := timers[:0:0]
	for _, t := range timers {
		at := hourglass.UnixMilli(t.At)
		if prev, ok := s.timed[t.ID]; ok && prev <= at {
			continue
		}
		s.timed[t.ID] = at
		keep = append(keep, t)
	}
	s.mu.Unlock()
	return s.sched.Schedule(ctx, keep)
}

// schedule times an attempt of a delivery at t.At, unless it is being
// attempted (its attempt reschedules it from what the database says). With
// force it is timed whatever the window; without, the loader takes it if
// it is due within the horizon and there is room (else a load brings it
// in time).
func (s *Service) schedule(t hourglass.DeliveryTimer, force bool) {
	at := hourglass.UnixMilli(t.At)
	s.mu.Lock()
	if s.busy[t.ID] {
		if force {
			if prev, ok := s.again[t.ID]; !ok || at < prev {
				s.again[t.ID] = at
			}
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	timers := []hourglass.DueItem{{ID: t.ID, At: t.At}}
	if force {
		s.time(context.Background(), timers) // in memory: cannot fail
		return
	}
	s.loader.Offer(context.Background(), timers) // the sink is in memory: cannot fail
}

// Run loads the pending deliveries due within the window and delivers until
// ctx ends; then it waits for the attempts in flight (they are cancelled, not
// recorded, and sent again after the next start) and returns nil. A
// database error is logged and retried, never returned.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.loader.Run(ctx) })
	wg.Go(func() { s.scanLoop(ctx) })
	wg.Go(func() { s.reads.run(ctx) })
	s.sched.Run(ctx, s.deliver) // in memory: returns nil once ctx ends and its workers stopped
	s.recording.Wait()
	wg.Wait()
	return nil
}

// deliver is the timing loop's hourglass.Deliver: it attempts each due
// delivery (the dispatcher hands over one at a time) and reschedules it as
// its outcome says. Attempts record their own failures, so it never fails.
func (s *Service) deliver(ctx context.Context, due []hourglass.DueItem) error {
	for _, t := range due {
		s.deliverOne(ctx, t.ID)
	}
	return nil
}

func (s *Service) deliverOne(ctx context.Context, id int64) {
	s.mu.Lock()
	delete(s.timed, id)
	s.mu.Unlock()
	s.yield(ctx)
	s.mu.Lock()
	if s.busy[id] {
		s.mu.Unlock()
		return // a second timer of a delivery being attempted: that attempt reschedules it
	}
	s.busy[id] = true
	s.mu.Unlock()
	next, force, rec := s.attempt(ctx, id)
	if rec == nil {
		s.finish(ctx, id, next, force)
		return
	}
	// Sent: the record waits for a commit, which the worker need not
	// wait for. The delivery stays busy until it is recorded; at most
	// recordsPerWorker×Workers records wait at once.
	select {
	case s.records <- struct{}{}:
		s.recording.Go(func() {
			next, force := rec()
			<-s.records
			s.finish(ctx, id, next, force)
		})
	case <-ctx.Done():
		next, force := rec() // shutting down: it returns at once
		s.finish(ctx, id, next, force)
	}
}

// recordsPerWorker bounds the records waiting for a commit, per worker:
// 1,024 with the default 16 workers. In a burst the workers send while the
// writer commits the records of the sends before, and a record waits for
// the writer's gather and a commit (milliseconds, more on a server): with 4
// per worker the workers waited for those tokens, and 100,000 first
// attempts took 10.9 s on SQLite and 13.0 s on PostgreSQL against 8.2-8.8 s
// and 9.3-11.3 s with 64 (docs/benchmarks/webhooks.md). The cost of the
// bound is at a crash: the attempts sent and not yet recorded are sent again
// after the restart (delivery is at least once; receivers dedupe on the
// event id), up to this many per worker.
const recordsPerWorker = 64

// finish ends delivery id's attempt: it is no longer busy, and it is timed
// again at next, if any (see attempt).
func (s *Service) finish(ctx context.Context, id int64, next hourglass.DeliveryTimer, force bool) {
	s.reads.drop(id)
	s.mu.Lock()
	delete(s.busy, id)
	if at, ok := s.again[id]; ok {
		delete(s.again, id)
		if next.ID == 0 || at < hourglass.UnixMilli(next.At) {
			next, force = hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}, true
		}
	}
	s.mu.Unlock()
	s.loader.Released()
	if next.ID != 0 && ctx.Err() == nil {
		s.schedule(next, force)
	}
}

// YieldMax bounds how long one attempt waits for Config.Yield, and
// yieldPoll is how often it asks.
const (
	YieldMax  = time.Second
	yieldPoll = 5 * time.Millisecond
)

// yield waits while Config.Yield says so, at most YieldMax.
func (s *Service) yield(ctx context.Context) {
	if s.cfg.Yield != nil {
		wait.WhileOn(ctx, s.clock, s.cfg.Yield, yieldPoll, YieldMax)
	}
}

// attempt makes one delivery attempt of id and records its outcome. It
// returns when to look at id again, if ever (ID 0: never; the database
// brings it back if needed), and whether to schedule that even beyond the
// horizon; or, once it sent the event, rec, which records the outcome and
// returns those.
//
// An attempt whose record fails still counts against the retry schedule:
// the store may refuse it for good (bytes it cannot hold, a constraint), and
// a delivery sent again every StoreRetry for ever holds a worker and the
// writer. The worker remembers it (unrecorded): the next attempt comes when
// the schedule says, and the schedule's last attempt makes a dead letter.
// When even that record fails, the dead letter (or a success) is recorded
// again, with a minimal error, backing off, and never sent again.
func (s *Service) attempt(ctx context.Context, id int64) (next hourglass.DeliveryTimer, force bool, rec func() (hourglass.DeliveryTimer, bool)) {
	d, err := s.reads.get(ctx, id)
	if hourglass.ErrorCode(err) == hourglass.CodeNotFound {
		s.forget(id)
		return hourglass.DeliveryTimer{}, false, nil // delivered, dead or deleted: a stale timer
	}
	if err != nil {
		if ctx.Err() != nil {
			return hourglass.DeliveryTimer{}, false, nil // shutting down: the next start loads it
		}
		s.log.Error("webhook: reading a delivery failed; retrying", "delivery", id, "retry_in", s.cfg.StoreRetry, "err", err)
		return hourglass.DeliveryTimer{ID: id, At: s.clock.Now().Add(s.cfg.StoreRetry)}, true, nil
	}
	if !s.parts.Has(d.OrderID) {
		s.forget(id)
		return hourglass.DeliveryTimer{}, false, nil // its partition moved to another node, which loaded it
	}
	now := s.clock.Now()
	if d.NextAttemptAt.After(now) {
		return hourglass.DeliveryTimer{ID: id, At: d.NextAttemptAt}, false, nil // a stale timer: it is due later
	}
	u := s.lookUp(id, d.Attempts)
	if u.at.After(now) {
		// The row says due, but an attempt it does not count says later.
		return hourglass.DeliveryTimer{ID: id, At: u.at}, true, nil
	}
	if u.outcome != "" {
		// Sent already, resolved, but not recorded: record it, do not send.
		next, force := s.record(ctx, d, u.made-1, u.outcome == OutcomeDelivered, u.reason, u.fails, sentAttempt{})
		return next, force, nil
	}
	if d.BlockedBy.ID != 0 {
		// An earlier event of this order is still on its way to this
		// webhook; when it finishes, it wakes this one (see resolved). The
		// timer below is only a safety net.
		at := now
		if d.BlockedBy.At.After(at) {
			at = d.BlockedBy.At
		}
		return hourglass.DeliveryTimer{ID: id, At: at.Add(s.cfg.Timeout + time.Second)}, true, nil
	}

	made := max(d.Attempts, u.made) // attempts before this one, recorded or not
	if made == 0 && !d.EventCreatedAt.IsZero() {
		if lo, ok := s.obs.(LagObserver); ok {
			lo.WebhookDeliveryLag(s.clock.Now().Sub(d.EventCreatedAt))
		}
	}
	start := s.clock.Now()
	ok, reason, status := s.send(ctx, d, made+1)
	sent := sentAttempt{at: start, took: s.clock.Now().Sub(start), status: status}
	if ctx.Err() != nil {
		return hourglass.DeliveryTimer{}, false, nil // cancelled by shutdown: not an attempt
	}
	return hourglass.DeliveryTimer{}, false, func() (hourglass.DeliveryTimer, bool) { return s.record(ctx, d, made, ok, reason, -1, sent) }
}

// sentAttempt is what the attempt log keeps of an attempt besides its
// outcome: when it was sent, how long it took, the HTTP status (0: none).
// The zero value is an outcome recorded again, whose sending is unknown.
type sentAttempt struct {
	at     time.Time
	took   time.Duration
	status int
}

// record records the outcome of d's attempt number made+1 (made attempts
// before it, recorded or not) and returns what attempt returns. fails is
// how many records of this outcome failed before, or -1 for an attempt just
// made.
func (s *Service) record(ctx context.Context, d hourglass.PendingDelivery, made int, ok bool, reason string, fails int, sent sentAttempt) (hourglass.DeliveryTimer, bool) {
	id := d.ID
	r := hourglass.AttemptResult{ID: id, Attempts: d.Attempts, OK: ok, WebhookID: d.WebhookID, OrderID: d.OrderID,
		At: sent.at, Duration: sent.took, StatusCode: sent.status, EventID: d.EventID, EventType: d.EventType}
	outcome := OutcomeDelivered
	if !ok {
		reason = SanitizeText(reason, MaxErrorLen)
		r.Error = reason
		if lost := made - d.Attempts; lost > 0 {
			// The row counts d.Attempts+1 attempts: say how many it missed.
			note := fmt.Sprintf(" (attempt %d; %d before it could not be recorded)", made+1, lost)
			r.Error = SanitizeText(reason, MaxErrorLen-len(note)) + note
		}
		outcome = OutcomeDead
		if made < len(s.cfg.Retry) {
			outcome = OutcomeRetry
			// Rounded up to the millisecond the stores keep: rounded down,
			// the next attempt could come up to 1 ms before its backoff.
			r.RetryAt = s.clock.Now().Add(s.backoff(made))
			if at := r.RetryAt.Truncate(time.Millisecond); !at.Equal(r.RetryAt) {
				r.RetryAt = at.Add(time.Millisecond)
			}
		}
	}
	rec, err := s.store.RecordAttempt(ctx, r)
	if err != nil && outcome == OutcomeDead && ctx.Err() == nil {
		// The text may be what the store refuses: the bare fact will do.
		r.Error = minimalError(r.Error)
		rec, err = s.store.RecordAttempt(ctx, r)
	}
	if err != nil {
		if ctx.Err() != nil {
			return hourglass.DeliveryTimer{}, false // shutting down: sent again after the next start
		}
		return s.recordFailed(d, made, outcome, r, reason, fails, err)
	}
	if !rec.Recorded {
		s.forget(id)
		return hourglass.DeliveryTimer{}, false // another attempt was recorded first, or its webhook was deleted
	}
	if outcome == OutcomeRetry && made > d.Attempts {
		// Recorded, but the row still counts fewer attempts than were made.
		s.remember(id, unrecorded{base: d.Attempts + 1, made: made + 1})
	} else {
		s.forget(id)
	}
	s.obs.WebhookAttempted(outcome)
	switch outcome {
	case OutcomeRetry:
		s.log.Warn("webhook: delivery failed; will retry", "delivery", id, "event", d.EventID, "webhook", d.WebhookID,
			"attempt", made+1, "retry_at", r.RetryAt, "err", r.Error)
		return hourglass.DeliveryTimer{ID: id, At: r.RetryAt}, false
	case OutcomeDead:
		s.log.Error("webhook: delivery failed its last attempt; moved to the dead letters", "delivery", id, "event", d.EventID,
			"webhook", d.WebhookID, "attempts", made+1, "err", r.Error)
	}
	// Resolved: wake the next delivery of its stream (same webhook and
	// order), which an earlier attempt found blocked by this one.
	if next := rec.Next; next.ID != 0 {
		if now := s.clock.Now(); next.At.Before(now) {
			next.At = now
		}
		s.schedule(next, true)
	}
	return hourglass.DeliveryTimer{}, false
}

// recordFailed remembers an attempt whose record failed with err (its
// error text reason, sanitised) and returns when to look at its delivery
// again: at the retry the schedule set, or, for a resolution (delivered or
// dead), after a backoff from StoreRetry doubling to recordRetryMax, to
// record it again.
func (s *Service) recordFailed(d hourglass.PendingDelivery, made int, outcome string, r hourglass.AttemptResult, reason string, fails int, err error) (hourglass.DeliveryTimer, bool) {
	if fails < 0 {
		s.obs.WebhookAttempted(OutcomeUnrecorded)
	}
	u := unrecorded{base: d.Attempts, made: made + 1, at: r.RetryAt}
	if outcome != OutcomeRetry {
		u.outcome, u.reason, u.fails = outcome, reason, max(fails, 0)+1
		u.at = s.clock.Now().Add(min(s.cfg.StoreRetry<<min(u.fails-1, 16), max(recordRetryMax, s.cfg.StoreRetry)))
	}
	s.remember(d.ID, u)
	s.log.Error("webhook: recording an attempt failed; it counts against the retry schedule", "delivery", d.ID,
		"webhook", d.WebhookID, "attempt", made+1, "outcome", outcome, "next", u.at, "err", err)
	return hourglass.DeliveryTimer{ID: d.ID, At: u.at}, true
}

// recordRetryMax bounds the wait between records of a resolved attempt
// that the store keeps refusing.
const recordRetryMax = time.Minute

// unrecorded is what a worker remembers of a delivery whose attempts the
// store refused to record: its row counts base attempts and says it is due,
// but made attempts were made.
type unrecorded struct {
	base int // the row's attempt count when last read
	made int // attempts made, recorded or not
	// at is when the delivery is next due: the row's due time is stale (a
	// load or scan brings the row back at once).
	at time.Time
	// outcome, when set (OutcomeDelivered or OutcomeDead), resolved the
	// last attempt but was not recorded: it is recorded again with reason,
	// not sent; fails counts the records that failed.
	outcome, reason string
	fails           int
}

// lookUp returns what is remembered of delivery id, whose row counts
// attempts: nothing if its row was reset (a dead letter retried: it gets
// the whole schedule again).
func (s *Service) lookUp(id int64, attempts int) unrecorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.unrecorded[id]
	if !ok {
		return unrecorded{}
	}
	if attempts < u.base {
		delete(s.unrecorded, id)
		return unrecorded{}
	}
	return *u
}

// remember keeps u for delivery id. At most MaxHeld deliveries are
// remembered: beyond that an arbitrary one is forgotten, and its row's own
// count (lower) rules its schedule again.
func (s *Service) remember(id int64, u unrecorded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.unrecorded[id]; !ok && len(s.unrecorded) >= s.cfg.MaxHeld {
		for other := range s.unrecorded {
			delete(s.unrecorded, other)
			break
		}
	}
	s.unrecorded[id] = &u
}

func (s *Service) forget(id int64) {
	s.mu.Lock()
	delete(s.unrecorded, id)
	s.mu.Unlock()
}

// minimalError returns the printable ASCII of msg, at most 128 bytes, and
// says the rest was not kept: text any store holds.
func minimalError(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg) && b.Len() < 128; i++ {
		if c := msg[i]; c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		}
	}
	return strings.TrimSpace(b.String()) + " (the store refused the full error text)"
}

// backoff returns the delay after a failed attempt when attempts were made
// before it: Retry[attempts] varied by ±Jitter, at least 1 ms.
func (s *Service) backoff(attempts int) time.Duration {
	d := s.cfg.Retry[attempts]
	if s.cfg.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + s.cfg.Jitter*(2*rand.Float64()-1)))
	}
	return max(d, time.Millisecond)
}

// maxErrorBody is how much of a failed response's body is read, and the
// most bytes of it kept in last_error.
const maxErrorBody = 256

// send POSTs the event as attempt number attempt and reports whether the
// receiver answered 2xx, or why not (text sanitised: see SanitizeText).
func (s *Service) send(ctx context.Context, d hourglass.PendingDelivery, attempt int) (ok bool, reason string, status int) {
	// Checked again at delivery: the allow-list may have changed since the
	// webhook was created.
	if err := s.cfg.Allow.CheckURL(d.URL); err != nil {
		return false, hourglass.ErrorMessage(err), 0
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return false, "building the request: " + redact.Scrub(err.Error(), d.URL), 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hourglass-webhooks/1")
	req.Header.Set(SignatureHeader, Sign(d.Secret, s.clock.Now(), d.Body))
	req.Header.Set(EventIDHeader, d.EventID)
	req.Header.Set(EventTypeHeader, string(d.EventType))
	req.Header.Set(DeliveryIDHeader, strconv.FormatInt(d.ID, 10))
	req.Header.Set(AttemptHeader, strconv.Itoa(attempt))
	resp, err := s.client.Do(req)
	if err != nil {
		// net/http's *url.Error quotes the whole URL, its user, password
		// and query tokens: the text is logged and kept in last_error.
		text := redact.Scrub(err.Error(), d.URL)
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return false, fmt.Sprintf("no response within %s: %s", s.cfg.Timeout, text), 0
		}
		return false, text, 0
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection can be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return true, "", resp.StatusCode
	}
	// The receiver's bytes may be anything: UTF-16 error text with NULs
	// (which PostgreSQL refuses), invalid UTF-8, terminal escapes.
	msg := "HTTP " + strconv.Itoa(resp.StatusCode)
	if text := strings.TrimSpace(decodeBody(head, maxErrorBody)); text != "" {
		msg += ": " + text
	}
	return false, msg, resp.StatusCode
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// scanLoop reads new deliveries, when the store says it created some and
// every PollInterval.
func (s *Service) scanLoop(ctx context.Context) {
	t := s.clock.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := s.scan(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("webhook: reading new deliveries failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.store.DeliveriesCreated():
		}
	}
}

// scan schedules the pending deliveries due between the previous scan (less
// ScanLag) and the horizon the loader covers. A new delivery is due at its
// event's commit time, so it falls in that range however its id compares to
// others: ids need not grow in commit order. Rows already held are
// scheduled again at the same time, which changes nothing.
func (s *Service) scan(ctx context.Context) error {
	now := hourglass.UnixMilli(s.clock.Now())
	s.mu.Lock()
	from := max(s.scanned, now-s.cfg.ScanLag.Milliseconds()*6) - s.cfg.ScanLag.Milliseconds()
	s.mu.Unlock()
	until := s.loader.Horizon()
	p := hourglass.DueDeliveriesParams{After: hourglass.FromUnixMilli(from), AfterID: 0, Until: hourglass.FromUnixMilli(until), Limit: LoadPageSizeDefault, Parts: s.parts.Owned()}
	for {
		page, err := s.store.DueDeliveries(ctx, p)
		if err != nil {
			return err
		}
		if took, _ := s.loader.Offer(ctx, deliveryTimers(page)); !took {
			return nil // full: the loader brings the rest as room comes back
		}
		if len(page) < p.Limit {
			break
		}
		last := page[len(page)-1]
		p.After, p.AfterID = last.At, last.ID
	}
	s.mu.Lock()
	s.scanned = max(s.scanned, now)
	s.mu.Unlock()
	return nil
}
