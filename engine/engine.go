// Package engine is the close path: it feeds order deadlines to a delay
// mechanism (a hourglass.Scheduler: the timing wheel by default), closes the
// orders it delivers in batches through the store, and sweeps the database
// for any pending order past its deadline that the mechanism missed.
//
// The database is the source of truth. For in-memory mechanisms (FeedWindow)
// only orders due within Config.Window are held, paged in from the database,
// so memory grows with the order rate, not with the number of pending
// orders, and a restart reloads only a window. For brokers (FeedOutbox) a
// relay publishes the timers each order's transaction wrote to the outbox.
// Every close is an idempotent compare-and-set in the store, so a timer that
// fires twice (mechanism and sweeper, a redelivery, or a stale timer for a
// paid order) changes nothing the second time.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/timing"
	"github.com/hourglass/hourglass/timing/timerloop"
	"github.com/hourglass/hourglass/timing/window"
)

// Defaults of Config.
const (
	WindowDefault        = 2 * time.Minute
	LoadIntervalDefault  = 30 * time.Second
	LoadPageSizeDefault  = 10000
	SweepIntervalDefault = time.Second
	SweepGraceDefault    = 2 * time.Second
	BacklogGraceDefault  = 30 * time.Second
	// BrokerBacklogMax is how far past its deadline an order may be left to
	// a mechanism the engine cannot see into (a broker) that is working
	// through a backlog: a broker slower than the sweeper must not make a
	// burst later than this.
	BrokerBacklogMax      = 5 * time.Second
	DegradedSweepInterval = 100 * time.Millisecond
	CloseBatchDefault     = 512
	RetryMaxDefault       = 5 * time.Second
	RelayBatchDefault     = 1000
	// HealthyAfter is how long the scheduler must go without an error before
	// the engine reports healthy again after one.
	HealthyAfter = 2 * time.Second
)

// Config configures an Engine; the zero value of each field means its default.
type Config struct {
	// Scheduler is the delay mechanism, which the wiring chooses (package
	// delay). Nil: the timing core's wheel (timerloop.NewWheel), the timing
	// of the default mechanism.
	Scheduler hourglass.Scheduler
	// Window is how far ahead deadlines are held by a FeedWindow scheduler.
	Window time.Duration
	// LoadInterval is how often the loader extends the window; it must be
	// less than Window.
	LoadInterval time.Duration
	// LoadPageSize is how many timers the loader reads per query.
	LoadPageSize int
	// SweepInterval is how often the sweeper scans for missed deadlines.
	SweepInterval time.Duration
	// SweepGrace is how long past its deadline an order must be before the
	// sweeper takes it, so that it does not race the scheduler. Zero means
	// the default; a negative value means no grace.
	SweepGrace time.Duration
	// BacklogGrace is how long the sweeper leaves due orders to a
	// scheduler that reports them in its backlog (Backlogger) while its
	// close path makes no progress: a burst being closed is not a missed
	// deadline, a close path stuck for this long is.
	BacklogGrace time.Duration
	// CloseBatch is the most orders the sweeper closes in one store call.
	CloseBatch int
	// RetryMax caps the backoff between attempts after a scheduler error.
	RetryMax time.Duration
	// RelayBatch is the most outbox timers published per Schedule call.
	RelayBatch int
	// Ownership divides the orders among the nodes sharing the database
	// (package cluster): the engine loads, schedules, relays and sweeps
	// only the orders of the partitions it owns, loads a partition's
	// window when it gains it, and drops the timers of one it lost as they
	// fire. Nil: this node owns every order.
	Ownership cluster.Ownership
	// Gate, when set, is asked before orders close (the payment check
	// before a close, which the wiring builds from package beforeclose):
	// every close path of the engine (the scheduler's deliveries, the
	// sweeper, start-up recovery) hands it the due orders instead of
	// closing them. Timers are not orders and are never gated.
	Gate Gate
	// Node is this node's id, recorded with every close and fire the
	// engine makes (hourglass.Closer).
	Node string
	// Clock gives now and times the engine's loops (default the system
	// clock).
	Clock    hourglass.Clock
	Logger   *slog.Logger
	Observer Observer
}

// Validate reports a configuration error, naming the field and its range.
func (c Config) Validate() error {
	check := func(name string, d, lo, hi time.Duration) error {
		if d != 0 && (d < lo || d > hi) {
			return fmt.Errorf("engine: %s must be between %s and %s, got %s", name, lo, hi, d)
		}
		return nil
	}
	for _, e := range []error{
		check("Window", c.Window, time.Second, 24*time.Hour),
		check("LoadInterval", c.LoadInterval, 10*time.Millisecond, 12*time.Hour),
		check("SweepInterval", c.SweepInterval, 10*time.Millisecond, time.Hour),
		check("SweepGrace", max(c.SweepGrace, 0), 0, time.Hour),
		check("BacklogGrace", c.BacklogGrace, time.Second, time.Hour),
		check("RetryMax", c.RetryMax, time.Millisecond, time.Hour),
	} {
		if e != nil {
			return e
		}
	}
	w, l := cmp.Or(c.Window, WindowDefault), cmp.Or(c.LoadInterval, LoadIntervalDefault)
	if l >= w {
		return fmt.Errorf("engine: LoadInterval (%s) must be less than Window (%s)", l, w)
	}
	if c.LoadPageSize < 0 || c.CloseBatch < 0 || c.RelayBatch < 0 {
		return errors.New("engine: LoadPageSize, CloseBatch and RelayBatch must be >= 0")
	}
	return nil
}

// Store is what the engine needs of the database. For a FeedOutbox
// scheduler it must also implement hourglass.Outbox. A store that is a
// hourglass.DueFeed (every store of package store is) tells the engine
// what its writes make due, and what other nodes' writes do: the engine
// follows it while it runs, and nothing else needs to tell it (Schedule,
// Cancel).
type Store interface {
	CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error)
	PendingDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error)
}

// TimerStore is the optional part of a Store that keeps clients' timers
// (hourglass.TimerStore's firing side). With it, the engine times timers
// exactly as order deadlines, with the same scheduler, loader, relay and
// sweeper: a timer's id (hourglass.IsTimerID) says which of the two a due
// id is, and a due timer is fired instead of closed.
type TimerStore interface {
	FireTimers(ctx context.Context, ids []int64) ([]hourglass.FiredTimer, error)
	TimersDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error)
}

// Gate holds due orders back from the close path until a check lets them
// close (Config.Gate).
type Gate interface {
	// Hold takes due orders the engine would close now and returns at
	// once, without waiting for a check. It closes each later through
	// close (a conditional close, as every close: an order paid meanwhile
	// is left alone), or settles it otherwise (paid, extended), or leaves
	// it pending (its check keeps failing; the sweeper hands it over
	// again), passing close the check's decision (hourglass.CauseCheckClose
	// or CauseCheckFailed), which the close records. It must bound its own
	// work (drop what it cannot hold: the sweeper brings it back) and be
	// safe for concurrent use. It returns
	// how many of orders it took that it did not hold already: a sweep
	// stops paging at a page of none, so that orders held pending while
	// their checks fail are not all read again at every sweep (they are
	// the earliest due, so they fill the first pages).
	Hold(orders []int64, close func(ctx context.Context, orders []int64, cause hourglass.CloseCause) error) (taken int)
}

// TimerObserver is an optional interface of an Observer: Fired is called
// once per timer the engine fired; swept is true when the sweeper found it.
type TimerObserver interface {
	Fired(t hourglass.FiredTimer, swept bool)
}

// Observer receives what the engine does, for metrics. Its methods are called
// from the engine's goroutines and must be safe for concurrent use.
type Observer interface {
	// Closed is called once per order the engine closed; swept is true when
	// the sweeper (not the scheduler) found it.
	Closed(c hourglass.ClosedOrder, swept bool)
	// Stale is called with the number of delivered timers whose close was a
	// no-op (already paid, cancelled or closed: a duplicate or stale timer).
	Stale(n int)
	// CloseFailed is called when a close call for n orders failed; they will
	// be retried.
	CloseFailed(n int, err error)
	// Swept is called after each sweep with the number of overdue orders found.
	Swept(found int)
	// SchedulerFailed is called when the scheduler's Run or the outbox relay
	// fails; the engine retries with backoff.
	SchedulerFailed(err error)
}

type nopObserver struct{}

func (nopObserver) Closed(hourglass.ClosedOrder, bool) {}
func (nopObserver) Stale(int)                          {}
func (nopObserver) CloseFailed(int, error)             {}
func (nopObserver) Swept(int)                          {}
func (nopObserver) SchedulerFailed(error)              {}

// Engine schedules and closes order deadlines. Schedule, Cancel, Pending,
// Ready and Healthy are safe for concurrent use; Run is called once.
type Engine struct {
	cfg    Config
	store  Store
	timers TimerStore // nil: the store keeps no timers
	rem    *reminders
	outbox hourglass.Outbox
	tobs   TimerObserver
	sched  hourglass.Scheduler
	info   hourglass.SchedulerInfo
	clock  hourglass.TimerClock
	log    *slog.Logger
	obs    Observer

	// loader feeds a FeedWindow scheduler the deadlines due within the
	// window (package window); nil for the other feeds.
	loader *window.Loader

	relayWake chan struct{}
	ready     atomic.Bool
	lastErr   atomic.Int64 // unix ms of the last scheduler error, 0 if none
	// While the first window load runs (loading), loadedTo is the latest
	// deadline (unix ms) up to which every pending order has been handed to
	// the scheduler; the sweeper leaves later ones to the loader.
	loading  atomic.Bool
	loadedTo atomic.Int64
	// firstPage is closed once the first page of orders of the first load
	// is with the scheduler (every reminder it loads before them too), or
	// that load ended or failed: Run is ready then.
	firstPage     chan struct{}
	firstPageOnce sync.Once
	// started is when Run began (unix ms); recovered turns true once every
	// order overdue then has been closed (see Recovered).
	started   atomic.Int64
	recovered atomic.Bool
	// For schedulers that are not Backloggers (brokers, sqlpoll): the
	// earliest deadline of the latest successful delivery and when it was
	// made (unix ms), so the sweeper can tell a mechanism working through
	// a backlog from one that lost timers.
	lastFront, lastDelivery atomic.Int64

	// parts follows the partitions owned and those gained whose window the
	// loader must load (or, fed from the outbox, the sweeper must sweep).
	parts      *cluster.Tracker
	gainedWake chan struct{}
}

// Backlogger is an optional interface of a Scheduler whose due timers
// wait in a queue for the close path (the in-memory timerloop's
// dispatcher). Backlog returns the earliest deadline among the due timers
// not yet delivered and when the close path last made progress (a
// delivery completed, or it started on an idle queue); ok is false when
// there are none. It must be safe for concurrent use and cheap enough to
// call once per sweep.
type Backlogger interface {
	Backlog() (oldest, progress time.Time, ok bool)
}

// New returns an engine over store. It does nothing until Run.
func New(store Store, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Window = cmp.Or(cfg.Window, WindowDefault)
	cfg.LoadInterval = cmp.Or(cfg.LoadInterval, LoadIntervalDefault)
	cfg.LoadPageSize = cmp.Or(cfg.LoadPageSize, LoadPageSizeDefault)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, SweepIntervalDefault)
	switch {
	case cfg.SweepGrace == 0:
		cfg.SweepGrace = SweepGraceDefault
	case cfg.SweepGrace < 0:
		cfg.SweepGrace = 0
	}
	cfg.BacklogGrace = cmp.Or(cfg.BacklogGrace, BacklogGraceDefault)
	cfg.CloseBatch = cmp.Or(cfg.CloseBatch, CloseBatchDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	cfg.RelayBatch = cmp.Or(cfg.RelayBatch, RelayBatchDefault)
	e := &Engine{cfg: cfg, store: store, clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger, obs: cfg.Observer, sched: cfg.Scheduler}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	if e.sched == nil {
		e.sched = timerloop.NewWheel(timerloop.Config{Clock: e.clock, Logger: e.log})
	}
	e.info = e.sched.Info()
	// Both optional: an engine over a store without timers only closes
	// orders; an Observer without Fired is not told of timers.
	if ts, ok := store.(TimerStore); ok {
		e.timers = ts
	}
	if to, ok := e.obs.(TimerObserver); ok {
		e.tobs = to
	}
	e.rem = newReminders(store, e.obs, e.log, e.clock, e.sched)
	sources := []window.Source{store.PendingDue}
	orders := 0 // the index of the orders' source, which Ready waits for
	if e.timers != nil {
		sources = append(sources, e.timers.TimersDue)
	}
	if e.rem.store != nil {
		// First: a reminder falls due before its order's deadline, and one
		// already due at start-up must be settled (sent, or skipped when
		// the deadline passed too) before its order closes.
		sources = append([]window.Source{e.rem.store.RemindersDue}, sources...)
		orders++
	}
	if e.info.Feed == hourglass.FeedOutbox {
		ob, ok := store.(hourglass.Outbox)
		if !ok {
			return nil, fmt.Errorf("engine: the %s scheduler needs a store with an outbox", e.info.Name)
		}
		e.outbox = ob
	}
	e.relayWake = make(chan struct{}, 1)
	e.firstPage = make(chan struct{})
	// A gained partition's window is loaded (its orders due meanwhile
	// included) and its outbox relayed; the timers of a lost one are
	// dropped as they fire (deliver).
	// A broker shared by the nodes consumes only this node's partitions,
	// and follows them as they move (hourglass.Partitioned).
	if ps, ok := e.sched.(hourglass.Partitioned); ok && cfg.Ownership != nil {
		ps.Own(cfg.Ownership.Owned())
		cfg.Ownership.OnChange(func(_, _ []int) { ps.Own(cfg.Ownership.Owned()) })
	}
	// A mechanism fed from the outbox (a broker) holds the timers of a
	// partition gained: those its old owner had fetched and not
	// acknowledged come back only after the broker's own timeout (NATS's
	// ack wait, 30 s), so the deadlines of a gained partition that passed
	// are swept at once, with no grace (sweepLoop).
	e.gainedWake = make(chan struct{}, 1)
	e.parts = cluster.Track(cfg.Ownership, func() {
		if e.loader != nil {
			e.loader.Wake()
		}
		wake(e.relayWake)
		if e.info.Feed == hourglass.FeedOutbox {
			wake(e.gainedWake)
		}
	})
	if e.info.Feed == hourglass.FeedWindow {
		e.loader = window.New(window.Config{
			Name:         "engine",
			Sources:      sources,
			Sink:         e.sched.Schedule,
			Window:       cfg.Window,
			LoadInterval: cfg.LoadInterval,
			PageSize:     cfg.LoadPageSize,
			Parts:        e.parts,
			// loadedTo is the least progress of the sources (the
			// sweeper's bound while the first load runs).
			OnPage: func(loadedTo int64) { e.loadedTo.Store(loadedTo) },
			// Ready once the orders' first page is with the scheduler:
			// the reminders, paged first, are all with it by then. Not
			// once every source has a page: sources are paged in turn,
			// so the timers' first page comes only after the last
			// overdue order, and a backlog of 1,000,000 held readiness
			// for seconds (docs/benchmarks/mass-expiry.md).
			OnSourcePage: func(source int, _ int64) {
				if source == orders {
					e.firstPageDone()
				}
			},
			OnFirstLoad: func() {
				// The first load finished (or failed: the sweeper takes
				// what it did not reach).
				e.loading.Store(false)
				e.firstPageDone()
			},
			RetryMax: cfg.RetryMax,
			Clock:    e.clock,
			Logger:   e.log,
		})
	}
	return e, nil
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Scheduler returns the delay mechanism in use.
func (e *Engine) Scheduler() hourglass.Scheduler { return e.sched }

// Ready reports whether the engine is running. It does not wait for
// start-up recovery (see Recovered).
func (e *Engine) Ready() bool { return e.ready.Load() }

// Recovered reports whether the backlog start-up found (orders whose
// deadline passed while the process was down) has been closed: the first
// window load is done and the close path holds no timer due before Run
// began, or (other feeds) the recovery sweep has finished. Alerts wait for
// it, so the backlog a restart leaves does not page anyone.
func (e *Engine) Recovered() bool { return e.recovered.Load() }

// checkRecovered sets recovered once the start-up backlog has drained.
func (e *Engine) checkRecovered() {
	if e.recovered.Load() || e.info.Feed != hourglass.FeedWindow || e.loading.Load() {
		return
	}
	if b, ok := e.sched.(Backlogger); ok {
		if oldest, _, ok := b.Backlog(); ok && hourglass.UnixMilli(oldest) < e.started.Load() {
			return
		}
	}
	e.recovered.Store(true)
}

// Healthy returns nil, or the reason the delay mechanism is degraded (it
// failed within the last HealthyAfter). While degraded, the sweeper closes
// due orders from the database at DegradedSweepInterval with no grace.
func (e *Engine) Healthy() error {
	last := e.lastErr.Load()
	if last != 0 && hourglass.UnixMilli(e.clock.Now())-last < HealthyAfter.Milliseconds() {
		return fmt.Errorf("delay mechanism %s failed in the last %s; the sweeper is closing orders from the database", e.info.Name, HealthyAfter)
	}
	return nil
}

func (e *Engine) failed(err error) {
	e.lastErr.Store(hourglass.UnixMilli(e.clock.Now()))
	e.obs.SchedulerFailed(err)
}

// Pending returns the number of timers the scheduler holds in memory, or 0
// if it does not say.
func (e *Engine) Pending() int {
	if p, ok := e.sched.(interface{ Pending() int }); ok {
		return p.Pending()
	}
	return 0
}

// Closing reports whether a burst is queued for the close path: an
// in-memory mechanism's dispatcher holds at least a full close batch
// (CloseBatchDefault) beyond what its workers have in hand. Work that can
// wait (webhook delivery) yields to it. A few queued closes are steady
// state on a slow database (Galera), not a burst: yielding to them made
// delivery attempts wait up to webhook.YieldMax each, capping a node near
// its delivery workers per second (TestClusterWebhooksGalera: 44 of 1,111
// events later than TTL + 2 s; 6 and 0 in two runs with this bound). False
// for mechanisms that do not say (brokers, sqlpoll). One lock.
func (e *Engine) Closing() bool {
	q, ok := e.sched.(interface{ Queued() int })
	return ok && q.Queued() >= CloseBatchDefault
}

// Schedule tells the engine a pending order was committed, for a store that
// is not a hourglass.DueFeed (a test's). Call it after the commit.
// Idempotent.
func (e *Engine) Schedule(t hourglass.DueItem) {
	e.due([]hourglass.DueItem{t})
}

// follow takes an announcement of the store's due feed: items due go to
// the scheduler, ids gone are cancelled where the mechanism can, and a
// reload loads the window again.
func (e *Engine) follow(u hourglass.DueUpdate) {
	if u.Reload {
		e.parts.GainAll()
	}
	if len(u.Due) > 0 {
		e.due(u.Due)
	}
	if len(u.Gone) > 0 {
		e.cancel(u.Gone)
	}
}

// due takes committed due items, of this node's writes or of others':
// those of owned partitions inside the horizon go to the scheduler
// (FeedWindow; beyond it, the loader brings them later), or wake the relay
// (FeedOutbox). The owner of another partition learns of its items from
// its own feed.
func (e *Engine) due(ts []hourglass.DueItem) {
	var mine []hourglass.DueItem
	for _, t := range ts {
		if e.parts.Has(t.ID) {
			mine = append(mine, t)
		}
	}
	if len(mine) == 0 {
		return
	}
	switch e.info.Feed {
	case hourglass.FeedWindow:
		if _, err := e.loader.Offer(context.Background(), mine); err != nil {
			e.log.Warn("engine: schedule failed; the loader or sweeper will catch them", "orders", len(mine), "err", err)
		}
	case hourglass.FeedOutbox:
		wake(e.relayWake)
	}
}

// supervisor returns the restart loop of the engine's goroutines: capped
// exponential backoff from 50 ms to RetryMax, failures told to failed.
func (e *Engine) supervisor(failed func(err error, retryIn time.Duration)) timing.Supervisor {
	return timing.Supervisor{Clock: e.clock, Backoff: timing.Backoff{Min: 50 * time.Millisecond, Max: e.cfg.RetryMax}, Failed: failed}
}

// Cancel drops the timer of an order that was paid or cancelled, where the
// mechanism can, for a store that is not a hourglass.DueFeed (a test's). It
// is an optimisation (a stale timer closes nothing).
func (e *Engine) Cancel(orderID int64) { e.cancel([]int64{orderID}) }

func (e *Engine) cancel(ids []int64) {
	if c, ok := e.sched.(hourglass.Canceler); ok {
		if err := c.Cancel(context.Background(), ids); err != nil {
			e.log.Debug("engine: cancel failed; the timer will fire into a no-op close", "orders", ids, "err", err)
		}
	}
}

// Run runs the scheduler, the loader or relay, and the sweeper until ctx
// ends, and returns nil then. It reports ready as soon as the scheduler
// holds the first page of order deadlines, and the reminders paged before
// them (FeedWindow), or at once (other feeds): start-up recovery is
// background work, not a gate. Orders whose
// deadline passed while the process was down are already shown closed
// (hourglass.Order.View) and refused payment by the store, so the API need
// not wait for them. For a
// FeedWindow scheduler the first load pages them into the scheduler (from
// the earliest deadline on), which closes them at the close path's burst
// rate; for the other feeds a recovery sweep closes them. The sweeper
// leaves orders the first load has not reached yet alone.
func (e *Engine) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	e.started.Store(hourglass.UnixMilli(e.clock.Now()))
	if e.info.Feed == hourglass.FeedWindow {
		e.loadedTo.Store(-1 << 62)
		e.loading.Store(true)
	}
	defer e.ready.Store(false)
	// The feed is followed from here on, before the first load reads the
	// database: a commit is either in that load or announced.
	if feed, ok := e.store.(hourglass.DueFeed); ok {
		wait := feed.WatchDue(ctx, e.follow)
		defer wait()
	}
	run(e.schedulerLoop)
	switch e.info.Feed {
	case hourglass.FeedWindow:
		run(e.loader.Run)
	case hourglass.FeedOutbox:
		run(e.relayLoop)
	}
	if e.info.Feed != hourglass.FeedWindow {
		run(e.recover)
	}
	run(e.sweepLoop)
	run(func(ctx context.Context) {
		e.rem.run(ctx, e.supervisor(func(err error, retryIn time.Duration) {
			e.log.Error("engine: sending reminders failed; retrying", "retry_in", retryIn, "err", err)
		}))
	})
	if e.info.Feed == hourglass.FeedWindow {
		select {
		case <-e.firstPage:
		case <-ctx.Done():
		}
	}
	if ctx.Err() == nil {
		e.ready.Store(true)
	}
	wg.Wait()
	return nil
}

// recover closes every order whose deadline passed while the process was
// down, for schedulers that are not fed a window (a broker may hold their
// timers too: whichever closes an order second makes a no-op). A node
// alone (no Ownership: it gains no partition later) then schedules again
// the deadlines its previous process may have held unacknowledged
// (reclaim): a SIGKILLed NATS consumer's come back only after the ack
// wait, 30 s late. A node of a cluster does the same for each partition it
// gains (takeOver), its first leases included.
func (e *Engine) recover(ctx context.Context) {
	sup := e.supervisor(func(err error, retryIn time.Duration) {
		e.log.Error("engine: start-up recovery failed; retrying", "retry_in", retryIn, "err", err)
	})
	err := sup.Run(ctx, func(ctx context.Context) error {
		// Run again after a failed reclaim, the sweep finds nothing left.
		recovered, err := e.sweep(ctx, 0, hourglass.CauseRecovery)
		if recovered > 0 {
			e.log.Info("engine: closed orders whose deadline passed while hourglass was down", "orders", recovered)
		}
		if err != nil || e.cfg.Ownership != nil {
			return err
		}
		return e.reclaim(ctx, e.clock.Now(), nil)
	})
	if err == nil {
		e.recovered.Store(true)
	}
}

// schedulerLoop runs the scheduler and restarts it with capped exponential
// backoff when it fails; a run of more than a minute starts the backoff
// over.
func (e *Engine) schedulerLoop(ctx context.Context) {
	sup := e.supervisor(func(err error, retryIn time.Duration) {
		e.failed(err)
		e.log.Error("engine: delay mechanism failed; restarting it", "scheduler", e.info.Name, "retry_in", retryIn, "err", err)
	})
	sup.ResetAfter = time.Minute
	sup.Run(ctx, func(ctx context.Context) error {
		if err := e.sched.Run(ctx, e.deliver); err != nil {
			return err
		}
		return errors.New("scheduler stopped")
	})
}

// deliver is the hourglass.Deliver the scheduler calls with due timers: one
// store call closes the orders among them, one fires the clients' timers;
// each is an idempotent compare-and-set.
func (e *Engine) deliver(ctx context.Context, due []hourglass.DueItem) error {
	var (
		orders, timers []int64
		reminders      []hourglass.DueItem
	)
	for _, t := range due {
		// A timer of a partition this node lost is the new owner's now
		// (it loaded it, or a Partitioned broker hands it over): dropped,
		// not closed twice.
		if !e.parts.Has(t.ID) {
			continue
		}
		switch t.Kind() {
		case hourglass.DueTimer:
			timers = append(timers, t.ID)
		case hourglass.DueReminder:
			reminders = append(reminders, t)
		default:
			orders = append(orders, t.ID)
		}
	}
	// Reminders go to their sender: never gated, never in the closes' way.
	e.rem.enqueue(reminders)
	if len(orders) == 0 && len(timers) == 0 {
		return nil
	}
	if e.cfg.Gate != nil && len(orders) > 0 {
		e.cfg.Gate.Hold(orders, e.closeGated(false))
		orders = nil
	}
	done, err := e.expireDelivered(ctx, due, orders, timers)
	if err != nil {
		return err
	}
	front := hourglass.UnixMilli(due[0].At)
	for _, t := range due[1:] {
		front = min(front, hourglass.UnixMilli(t.At))
	}
	e.lastFront.Store(front)
	e.lastDelivery.Store(hourglass.UnixMilli(e.clock.Now()))
	if stale := len(orders) + len(timers) - done; stale > 0 {
		e.obs.Stale(stale)
	}
	return nil
}

// expireDelivered expires what the scheduler delivered: at the deadline,
// or, for a deadline that passed before this process started (the first
// window load pages those into the scheduler), as start-up recovery.
func (e *Engine) expireDelivered(ctx context.Context, due []hourglass.DueItem, orders, timers []int64) (int, error) {
	started := e.started.Load()
	if !slices.ContainsFunc(due, func(t hourglass.DueItem) bool { return hourglass.UnixMilli(t.At) < started }) {
		return e.expire(ctx, orders, timers, false, hourglass.CauseDeadline)
	}
	early := map[int64]bool{}
	for _, t := range due {
		if hourglass.UnixMilli(t.At) < started {
			early[t.ID] = true
		}
	}
	split := func(ids []int64) (before, after []int64) {
		for _, id := range ids {
			if early[id] {
				before = append(before, id)
			} else {
				after = append(after, id)
			}
		}
		return before, after
	}
	ro, do := split(orders)
	rt, dt := split(timers)
	n, err := e.expire(ctx, ro, rt, false, hourglass.CauseRecovery)
	if err != nil {
		return n, err
	}
	m, err := e.expire(ctx, do, dt, false, hourglass.CauseDeadline)
	return n + m, err
}

// expire closes the listed orders and fires the listed timers that are
// still due, tells the observer, and returns how many it closed or fired;
// cause (and the node) is recorded with each close and fire. On error the
// caller retries them all (both are idempotent).
func (e *Engine) expire(ctx context.Context, orders, timers []int64, swept bool, cause hourglass.CloseCause) (int, error) {
	n := 0
	ctx = hourglass.WithCloser(ctx, hourglass.Closer{Cause: cause, Node: e.cfg.Node})
	if len(orders) > 0 {
		closed, err := e.store.CloseOrders(ctx, orders)
		if err != nil {
			e.obs.CloseFailed(len(orders), err)
			return n, err
		}
		for _, c := range closed {
			e.obs.Closed(c, swept)
		}
		n += len(closed)
	}
	if len(timers) > 0 && e.timers != nil {
		fired, err := e.timers.FireTimers(ctx, timers)
		if err != nil {
			e.obs.CloseFailed(len(timers), err)
			return n, err
		}
		if e.tobs != nil {
			for _, f := range fired {
				e.tobs.Fired(f, swept)
			}
		}
		n += len(fired)
	}
	return n, nil
}

// closeGated returns the close function the Gate calls for orders whose
// check let them close: they close (and are observed) as the scheduler's
// or the sweeper's (swept) closes are, recorded with the check's decision
// as their cause; those no longer due are stale.
func (e *Engine) closeGated(swept bool) func(ctx context.Context, orders []int64, cause hourglass.CloseCause) error {
	return func(ctx context.Context, orders []int64, cause hourglass.CloseCause) error {
		n, err := e.expire(ctx, orders, nil, swept, cause)
		if err != nil {
			return err
		}
		if stale := len(orders) - n; stale > 0 {
			e.obs.Stale(stale)
		}
		return nil
	}
}

func (e *Engine) firstPageDone() { e.firstPageOnce.Do(func() { close(e.firstPage) }) }

// relayLoop publishes the outbox to a FeedOutbox scheduler: woken by every
// create, and every 100 ms in case a wake was missed or a publish failed.
func (e *Engine) relayLoop(ctx context.Context) {
	t := e.clock.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	backoff := timing.Backoff{Min: 50 * time.Millisecond, Max: e.cfg.RetryMax}
	for {
		err := e.relay(ctx)
		if err != nil && ctx.Err() == nil {
			e.failed(err)
			wait := backoff.Next()
			e.log.Error("engine: outbox relay failed; retrying", "scheduler", e.info.Name, "retry_in", wait, "err", err)
			if timing.Sleep(ctx, e.clock, wait) != nil {
				return
			}
			continue
		}
		backoff.Reset()
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-e.relayWake:
		}
	}
}

// relay publishes outbox timers until the outbox is empty. A timer is removed
// from the outbox only after Schedule returned (published and confirmed), so
// a crash in between publishes it again: a duplicate, never a loss.
func (e *Engine) relay(ctx context.Context) error {
	for {
		batch, err := e.outbox.OutboxBatch(ctx, e.cfg.RelayBatch, e.parts.Owned())
		if err != nil || len(batch) == 0 {
			return err
		}
		if err := e.sched.Schedule(ctx, batch); err != nil {
			return fmt.Errorf("publish %d timers: %w", len(batch), err)
		}
		if err := e.outbox.OutboxDone(ctx, batch); err != nil {
			return err
		}
		if len(batch) < e.cfg.RelayBatch {
			return nil
		}
	}
}

// sweepLoop runs the compensation sweep every SweepInterval, or every
// DegradedSweepInterval with no grace while the scheduler is failing, so
// orders keep closing on time from the database.
func (e *Engine) sweepLoop(ctx context.Context) {
	// Tick at the shorter of the two intervals, so a scheduler failure
	// switches to degraded sweeping within DegradedSweepInterval, not after
	// a whole SweepInterval.
	tick := min(e.cfg.SweepInterval, DegradedSweepInterval)
	ticker := e.clock.NewTicker(tick)
	defer ticker.Stop()
	last := e.clock.Now()
	retryGained := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.gainedWake:
			if e.info.Feed != hourglass.FeedOutbox {
				continue // the loader loads a gained partition's window
			}
			if parts := e.parts.TakeGained(); len(parts) > 0 {
				if err := e.takeOver(ctx, parts); err != nil && ctx.Err() == nil {
					e.parts.Regain(parts)
					retryGained = true
					e.log.Error("engine: sweeping the partitions gained failed; retrying at the next tick", "partitions", len(parts), "err", err)
				}
			}
			continue
		case <-ticker.C():
		}
		if retryGained {
			retryGained = false
			wake(e.gainedWake)
		}
		e.checkRecovered()
		interval, grace := e.cfg.SweepInterval, e.cfg.SweepGrace
		if e.Healthy() != nil {
			interval, grace = min(interval, DegradedSweepInterval), 0
		}
		now := e.clock.Now()
		if now.Sub(last) < interval {
			continue
		}
		last = now
		if _, err := e.sweep(ctx, grace, hourglass.CauseSweeper); err != nil && ctx.Err() == nil {
			e.log.Error("engine: sweep failed; retrying at the next interval", "err", err)
		}
	}
}

// takeOver does what a partition gained by a node fed from the outbox
// needs: its deadlines that passed are swept at once, and, when the
// mechanism may hold a dead owner's timers for a while
// (hourglass.Reclaiming), its deadlines within that horizon are scheduled
// again, so that they fire on time here.
func (e *Engine) takeOver(ctx context.Context, parts hourglass.Parts) error {
	now := e.clock.Now()
	if _, err := e.sweepIn(ctx, now, parts, hourglass.CauseTakeover); err != nil {
		return err
	}
	return e.reclaim(ctx, now, parts)
}

// reclaim schedules again, when the mechanism may hold a dead owner's
// timers for a while (hourglass.Reclaiming), the deadlines of parts (nil:
// every partition) from now to its horizon: that owner may have been
// another node, or this one's previous process.
func (e *Engine) reclaim(ctx context.Context, now time.Time, parts hourglass.Parts) error {
	r, ok := e.sched.(hourglass.Reclaiming)
	if !ok {
		return nil
	}
	sources := []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error){e.store.PendingDue}
	if e.timers != nil {
		sources = append(sources, e.timers.TimersDue)
	}
	sources = e.rem.sources(sources)
	n := 0
	for _, due := range sources {
		p := hourglass.PendingDueParams{Until: now.Add(r.ReclaimHorizon()), Limit: e.cfg.RelayBatch, Parts: parts}
		for {
			page, err := due(ctx, p)
			if err != nil {
				return err
			}
			if len(page) > 0 {
				if err := r.Reclaim(ctx, page); err != nil {
					return fmt.Errorf("engine: schedule again the deadlines of the partitions gained: %w", err)
				}
				n += len(page)
			}
			if len(page) < p.Limit {
				break
			}
			last := page[len(page)-1]
			p.After, p.AfterID = last.At, last.ID
		}
	}
	if n > 0 {
		e.log.Info("engine: scheduled again the deadlines that their old owner may hold", "partitions", cmp.Or(len(parts), hourglass.Partitions), "deadlines", n, "horizon", r.ReclaimHorizon())
	}
	return nil
}

// sweepUntil returns the latest deadline the sweeper may take: grace
// before now, and, while the scheduler is healthy, before what the close
// path is still working through: the first load's cursor, and the oldest
// due timer the scheduler has not delivered yet, unless the close path has
// made no progress for BacklogGrace (then it is stuck, and the sweeper
// takes over); for other schedulers, the earliest deadline of their latest
// delivery, if it was recent (and at most BrokerBacklogMax back). Orders before that point which are
// still pending were lost by the mechanism: the sweeper's business.
func (e *Engine) sweepUntil(grace time.Duration) time.Time {
	now := e.clock.Now()
	until := now.Add(-grace)
	if e.Healthy() != nil {
		return until
	}
	if e.loading.Load() {
		until = minTime(until, hourglass.FromUnixMilli(e.loadedTo.Load()))
	}
	if b, ok := e.sched.(Backlogger); ok {
		if oldest, progress, ok := b.Backlog(); ok && now.Sub(progress) < e.cfg.BacklogGrace {
			until = minTime(until, oldest.Add(-time.Millisecond))
		}
		return until
	}
	// A mechanism whose queue the engine cannot see (a broker) and which
	// delivered within the last max(SweepGrace, 1 s) is working through
	// deadlines from its latest delivery's earliest on: those are its
	// backlog (in steady state that is a few ms ago, and changes nothing).
	// Orders due before it that are still pending were lost; and a
	// mechanism that stopped delivering is swept as before.
	window := max(e.cfg.SweepGrace, time.Second).Milliseconds()
	if last := e.lastDelivery.Load(); last != 0 && hourglass.UnixMilli(now)-last <= window {
		deferred := minTime(until, hourglass.FromUnixMilli(e.lastFront.Load()-1))
		// ... but for at most BrokerBacklogMax past a deadline.
		if floor := now.Add(-max(BrokerBacklogMax, e.cfg.SweepGrace)); deferred.Before(floor) {
			deferred = minTime(until, floor)
		}
		until = deferred
	}
	return until
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sweep closes every pending order whose deadline is more than grace in the
// past (and not left to the close path, see sweepUntil) and returns how
// many it closed. Normally it finds none: each one it finds is a timer the
// scheduler lost or was late with (or a restart's backlog when the
// scheduler is not fed a window).
func (e *Engine) sweep(ctx context.Context, grace time.Duration, cause hourglass.CloseCause) (int, error) {
	return e.sweepIn(ctx, e.sweepUntil(grace), e.parts.Owned(), cause)
}

// sweepIn closes every pending order of parts due at or before until, and
// fires every such timer, recording cause with each.
func (e *Engine) sweepIn(ctx context.Context, until time.Time, parts hourglass.Parts, cause hourglass.CloseCause) (int, error) {
	total, found := 0, 0
	defer func() { e.obs.Swept(found) }()
	sources := []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error){e.store.PendingDue}
	if e.timers != nil {
		sources = append(sources, e.timers.TimersDue)
	}
	sources = e.rem.sweepSources(sources)
	for _, due := range sources {
		// Paged by cursor: an order the gate holds stays pending, so a
		// page is not emptied by its closes.
		p := hourglass.PendingDueParams{Until: until, Limit: e.cfg.CloseBatch, Parts: parts}
		for {
			page, err := due(ctx, p)
			if err != nil {
				return total, err
			}
			found += len(page)
			var orders, timers, reminders []int64
			for _, t := range page {
				switch t.Kind() {
				case hourglass.DueTimer:
					timers = append(timers, t.ID)
				case hourglass.DueReminder:
					reminders = append(reminders, hourglass.ReminderOrderID(t.ID))
				default:
					orders = append(orders, t.ID)
				}
			}
			sent, err := e.rem.send(ctx, reminders, true)
			total += sent
			if err != nil {
				return total, err
			}
			if len(page) > 0 {
				last := page[len(page)-1]
				p.After, p.AfterID = last.At, last.ID
			}
			gateTookNone := false
			if e.cfg.Gate != nil && len(orders) > 0 {
				gateTookNone = e.cfg.Gate.Hold(orders, e.closeGated(true)) == 0
				orders = nil
			}
			n, err := e.expire(ctx, orders, timers, true, cause)
			total += n
			if err != nil {
				return total, err
			}
			if len(page) < e.cfg.CloseBatch || gateTookNone {
				break
			}
		}
	}
	return total, nil
}
