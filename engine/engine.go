// Package engine is the close path: it keeps a window of the nearest
// deadlines in a timing wheel, closes due orders in batches through the
// store, pages the next window in from the database, and sweeps the database
// for any pending order past its deadline that the wheel missed.
//
// The database is the source of truth and the wheel a window onto it: only
// orders due within Config.Window are in memory, so memory grows with the
// order rate, not with the number of pending orders, and a restart reloads
// only a window. Every close is an idempotent compare-and-set in the store,
// so a timer that fires twice (wheel and sweeper, or a stale timer for a
// paid order) changes nothing the second time.
package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timingwheel"
)

// Defaults of Config.
const (
	WindowDefault        = 2 * time.Minute
	LoadIntervalDefault  = 30 * time.Second
	LoadPageSizeDefault  = 10000
	SweepIntervalDefault = time.Second
	SweepGraceDefault    = 2 * time.Second
	CloseBatchDefault    = 512
	ClosersDefault       = 2
	RetryMaxDefault      = 5 * time.Second
)

// Config configures an Engine; the zero value of each field means its default.
type Config struct {
	// Window is how far ahead deadlines are held in memory.
	Window time.Duration
	// LoadInterval is how often the loader extends the window; it must be
	// less than Window.
	LoadInterval time.Duration
	// LoadPageSize is how many timers the loader reads per query.
	LoadPageSize int
	// SweepInterval is how often the sweeper scans for missed deadlines.
	SweepInterval time.Duration
	// SweepGrace is how long past its deadline an order must be before the
	// sweeper takes it, so that it does not race the wheel. Zero means the
	// default; a negative value means no grace.
	SweepGrace time.Duration
	// CloseBatch is the most orders closed in one store call.
	CloseBatch int
	// Closers is the number of concurrent close calls.
	Closers int
	// RetryMax caps the backoff between retries of a failed close.
	RetryMax time.Duration
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
	if c.LoadPageSize < 0 || c.CloseBatch < 0 || c.Closers < 0 || c.Closers > 64 {
		return fmt.Errorf("engine: LoadPageSize, CloseBatch must be >= 0 and Closers 0..64")
	}
	return nil
}

// Store is what the engine needs of the database.
type Store interface {
	CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error)
	PendingDue(ctx context.Context, after time.Time, afterID int64, until time.Time, limit int) ([]hourglass.Timer, error)
}

// Observer receives what the engine does, for metrics. Its methods are called
// from the engine's goroutines and must be safe for concurrent use.
type Observer interface {
	// Closed is called once per order the engine closed; swept is true when
	// the sweeper (not the wheel) found it.
	Closed(c hourglass.ClosedOrder, swept bool)
	// CloseFailed is called when a close call for n orders failed; they will
	// be retried.
	CloseFailed(n int, err error)
	// Swept is called after each sweep with the number of overdue orders found.
	Swept(found int)
}

type nopObserver struct{}

func (nopObserver) Closed(hourglass.ClosedOrder, bool) {}
func (nopObserver) CloseFailed(int, error)             {}
func (nopObserver) Swept(int)                          {}

// Engine schedules and closes order deadlines. Schedule, Cancel, Pending and
// Ready are safe for concurrent use; Run is called once.
type Engine struct {
	cfg   Config
	store Store
	clock hourglass.Clock
	log   *slog.Logger
	obs   Observer

	mu sync.Mutex
	// wheel holds the timers of pending orders due up to horizon.
	wheel *timingwheel.Wheel
	// horizon is the latest deadline the wheel is responsible for: the
	// loader raises it before querying, so an order committed during a load
	// is either seen by the query or accepted by Schedule.
	horizon int64
	// sleepUntil is the deadline the timer loop is sleeping towards.
	sleepUntil int64
	wake       chan struct{}

	due   dueQueue
	ready atomic.Bool
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
	cfg.CloseBatch = cmp.Or(cfg.CloseBatch, CloseBatchDefault)
	cfg.Closers = cmp.Or(cfg.Closers, ClosersDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	e := &Engine{cfg: cfg, store: store, clock: cfg.Clock, log: cfg.Logger, obs: cfg.Observer}
	if e.clock == nil {
		e.clock = hourglass.SystemClock{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	e.wheel = timingwheel.New(hourglass.UnixMilli(e.clock.Now()))
	e.horizon = -1 << 62 // nothing accepted until the first load
	e.wake = make(chan struct{}, 1)
	e.due.init()
	return e, nil
}

// Ready reports whether start-up recovery has run and the first window is
// loaded.
func (e *Engine) Ready() bool { return e.ready.Load() }

// Pending returns the number of timers held in memory.
func (e *Engine) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wheel.Len()
}

// Schedule tells the engine a pending order was committed. Call it after the
// commit. Timers beyond the window are left to the loader. Idempotent.
func (e *Engine) Schedule(t hourglass.Timer) {
	d := hourglass.UnixMilli(t.Deadline)
	e.mu.Lock()
	if d > e.horizon {
		e.mu.Unlock()
		return
	}
	e.wheel.Add(uint64(t.OrderID), d)
	wake := d < e.sleepUntil
	e.mu.Unlock()
	if wake {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// Cancel drops the timer of an order that was paid or cancelled. It is an
// optimisation (a stale timer closes nothing) and idempotent.
func (e *Engine) Cancel(orderID int64) {
	e.mu.Lock()
	e.wheel.Cancel(uint64(orderID))
	e.mu.Unlock()
}

// Run recovers (closes every order whose deadline passed while the process
// was down), loads the first window, marks the engine ready and then runs the
// timer loop, closers, loader and sweeper until ctx ends. It returns nil
// when ctx ends, or the recovery error.
func (e *Engine) Run(ctx context.Context) error {
	recovered, err := e.sweep(ctx, 0)
	if err != nil {
		return fmt.Errorf("engine: start-up recovery: %w", err)
	}
	if recovered > 0 {
		e.log.Info("engine: closed orders whose deadline passed while hourglass was down", "orders", recovered)
	}
	if err := e.load(ctx); err != nil {
		return fmt.Errorf("engine: load first window: %w", err)
	}
	e.ready.Store(true)
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(e.timerLoop)
	for range e.cfg.Closers {
		run(e.closeLoop)
	}
	run(e.loadLoop)
	run(e.sweepLoop)
	<-ctx.Done()
	e.due.close()
	wg.Wait()
	e.ready.Store(false)
	return nil
}

// timerLoop sleeps until the wheel's next deadline (or until Schedule adds an
// earlier one), advances the wheel and hands what fired to the closers.
func (e *Engine) timerLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var fired []int64
	for {
		now := e.clock.Now()
		nowMs := hourglass.UnixMilli(now)
		fired = fired[:0]
		e.mu.Lock()
		e.wheel.Advance(nowMs, func(id uint64, _ int64) { fired = append(fired, int64(id)) })
		next, ok := e.wheel.NextDeadline()
		if !ok {
			next = nowMs + time.Hour.Milliseconds()
		}
		e.sleepUntil = next
		e.mu.Unlock()
		if len(fired) > 0 {
			e.due.push(fired)
		}
		// Sleep to the start of the deadline's millisecond: a deadline of D ms
		// is due at D ms exactly, and the wheel fires it at any now >= D.
		wait := hourglass.FromUnixMilli(next).Sub(now)
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-e.wake:
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
			}
		} else if ctx.Err() != nil {
			return
		}
	}
}

// closeLoop takes due order ids in batches and closes them, retrying a failed
// batch with capped exponential backoff.
func (e *Engine) closeLoop(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		ids, ok := e.due.pop(e.cfg.CloseBatch)
		if !ok {
			return
		}
		closed, err := e.store.CloseOrders(ctx, ids)
		if err != nil {
			if ctx.Err() != nil {
				return // shutting down: the sweeper closes these on the next start
			}
			e.obs.CloseFailed(len(ids), err)
			backoff = min(max(2*backoff, 10*time.Millisecond), e.cfg.RetryMax)
			e.log.Error("engine: close batch failed; retrying", "orders", len(ids), "retry_in", backoff, "err", err)
			e.due.push(ids)
			if !sleep(ctx, backoff) {
				return
			}
			continue
		}
		backoff = 0
		for _, c := range closed {
			e.obs.Closed(c, false)
		}
	}
}

// loadLoop extends the window every LoadInterval.
func (e *Engine) loadLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.LoadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.load(ctx); err != nil && ctx.Err() == nil {
				e.log.Error("engine: load window failed; retrying at the next interval", "err", err)
			}
		}
	}
}

// load pages every pending order due up to now+Window and past the current
// horizon into the wheel.
func (e *Engine) load(ctx context.Context) error {
	target := hourglass.UnixMilli(e.clock.Now().Add(e.cfg.Window))
	e.mu.Lock()
	from := e.horizon
	if target <= from {
		e.mu.Unlock()
		return nil
	}
	// Raise the horizon first: a create committing from now on is accepted by
	// Schedule; one committed earlier is visible to the queries below.
	e.horizon = target
	e.mu.Unlock()
	after, afterID := hourglass.FromUnixMilli(max(from, 0)), int64(1<<63-1)
	if from < 0 {
		afterID = 0
		after = hourglass.FromUnixMilli(0)
	}
	for {
		page, err := e.store.PendingDue(ctx, after, afterID, hourglass.FromUnixMilli(target), e.cfg.LoadPageSize)
		if err != nil {
			// Lower the horizon back so the next load retries this range.
			e.mu.Lock()
			if e.horizon == target {
				e.horizon = min(from, hourglass.UnixMilli(after))
			}
			e.mu.Unlock()
			return err
		}
		if len(page) == 0 {
			return nil
		}
		earliest := int64(1<<63 - 1)
		e.mu.Lock()
		for _, t := range page {
			d := hourglass.UnixMilli(t.Deadline)
			e.wheel.Add(uint64(t.OrderID), d)
			earliest = min(earliest, d)
		}
		wake := earliest < e.sleepUntil
		e.mu.Unlock()
		if wake {
			select {
			case e.wake <- struct{}{}:
			default:
			}
		}
		last := page[len(page)-1]
		after, afterID = last.Deadline, last.OrderID
		if len(page) < e.cfg.LoadPageSize {
			return nil
		}
	}
}

// sweepLoop runs the compensation sweep every SweepInterval.
func (e *Engine) sweepLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := e.sweep(ctx, e.cfg.SweepGrace); err != nil && ctx.Err() == nil {
				e.log.Error("engine: sweep failed; retrying at the next interval", "err", err)
			}
		}
	}
}

// sweep closes every pending order whose deadline is more than grace in the
// past and returns how many it closed. Normally it finds none: each one it
// finds is a timer the wheel lost (or a restart's backlog).
func (e *Engine) sweep(ctx context.Context, grace time.Duration) (int, error) {
	until := e.clock.Now().Add(-grace)
	total, found := 0, 0
	defer func() { e.obs.Swept(found) }()
	for {
		page, err := e.store.PendingDue(ctx, time.UnixMilli(0), 0, until, e.cfg.CloseBatch)
		if err != nil {
			return total, err
		}
		if len(page) == 0 {
			return total, nil
		}
		found += len(page)
		ids := make([]int64, len(page))
		for i, t := range page {
			ids[i] = t.OrderID
		}
		closed, err := e.store.CloseOrders(ctx, ids)
		if err != nil {
			e.obs.CloseFailed(len(ids), err)
			return total, err
		}
		for _, c := range closed {
			e.obs.Closed(c, true)
		}
		total += len(closed)
		if len(page) < e.cfg.CloseBatch {
			return total, nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
