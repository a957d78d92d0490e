// Package gotimer is the in-memory delay mechanism the Go documentation
// suggests: one time.AfterFunc per pending order. The Go runtime keeps the
// timers (in per-P heaps) and runs each callback on its own goroutine at the
// deadline; the callback hands the timer to a dispatch.Dispatcher, whose
// workers deliver fired timers in batches and retry a failed delivery with
// backoff.
//
// A map from order id to its runtime timer, under a mutex, makes Cancel and
// re-Schedule possible: Cancel stops the runtime timer, and scheduling an
// order already held replaces its timer. A callback that lost a race with
// Cancel or a replacement finds its entry gone from the map and does
// nothing.
//
// Timers live only in memory (Info().Durable is false): the engine feeds the
// next window of pending orders from the database (FeedWindow) and pages it
// in again after a restart, so a crash loses nothing.
//
// Costs, for n timers held: Schedule and Cancel O(log n) in the runtime's
// timer heap plus a map operation; each fired timer starts a goroutine.
// Memory is the largest of the in-memory mechanisms, about 230 bytes per
// timer (the runtime timer, the callback's closure, the entry and the map
// slot; see BenchmarkMemoryPerTimer).
package gotimer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing/dispatch"
)

// ErrClosed is returned by Schedule after Close.
var ErrClosed = errors.New("gotimer: scheduler is closed")

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	// Clock gives "now", from which each timer's delay is computed, and
	// the timers (hourglass.WithTimers: the runtime's for the system
	// clock, or for a clock that gives only Now). Default the system clock.
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Dispatch configures the workers that deliver fired timers.
	Dispatch dispatch.Config
}

// pending is one order's armed runtime timer. Its identity tells a firing
// callback whether it is still the order's current timer.
type pending struct {
	timer    hourglass.ClockTimer
	deadline time.Time
}

// Scheduler holds one time.AfterFunc per order. All its methods are safe for
// concurrent use; Run must not be called twice at once.
type Scheduler struct {
	clock hourglass.TimerClock
	disp  *dispatch.Dispatcher

	mu     sync.Mutex
	timers map[int64]*pending
	closed bool
}

var (
	_ hourglass.Scheduler = (*Scheduler)(nil)
	_ hourglass.Canceler  = (*Scheduler)(nil)
)

// New returns an empty gotimer scheduler. It cannot fail: there is nothing
// to connect to.
func New(cfg Config) *Scheduler {
	clock := hourglass.WithTimers(cfg.Clock)
	if cfg.Dispatch.Logger == nil {
		cfg.Dispatch.Logger = cfg.Logger
	}
	if cfg.Dispatch.Clock == nil {
		cfg.Dispatch.Clock = clock
	}
	return &Scheduler{
		clock:  clock,
		disp:   dispatch.New(cfg.Dispatch),
		timers: make(map[int64]*pending),
	}
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "gotimer", Feed: hourglass.FeedWindow}
}

// Schedule implements hourglass.Scheduler: it arms one runtime timer per
// order. Scheduling an order already held stops its timer and arms a new one
// (idempotent for the same deadline). A timer that fires before Run has
// started waits in the dispatcher until Run delivers it. It fails only with
// ErrClosed, after Close.
func (s *Scheduler) Schedule(_ context.Context, timers []hourglass.DueItem) error {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for _, t := range timers {
		if old, ok := s.timers[t.ID]; ok {
			old.timer.Stop()
		}
		s.timers[t.ID] = s.arm(t.ID, t.At, t.At.Sub(now))
	}
	return nil
}

// arm starts a runtime timer for id that calls fire after wait. The caller
// holds s.mu, so the callback cannot look at the map before the caller
// stored the returned entry.
func (s *Scheduler) arm(id int64, deadline time.Time, wait time.Duration) *pending {
	p := &pending{deadline: deadline}
	p.timer = s.clock.AfterFunc(wait, func() { s.fire(id, p) })
	return p
}

// fire runs on the runtime's goroutine when p's timer expires.
func (s *Scheduler) fire(id int64, p *pending) {
	s.mu.Lock()
	if s.timers[id] != p {
		s.mu.Unlock() // cancelled or replaced after the runtime fired it
		return
	}
	// Runtime timers measure elapsed time; deadlines are wall-clock times.
	// Should the two disagree (a wall clock stepped back), wait the rest
	// rather than deliver early.
	if early := p.deadline.Sub(s.clock.Now()); early > 0 {
		p.timer.Reset(early)
		s.mu.Unlock()
		return
	}
	delete(s.timers, id)
	s.mu.Unlock()
	s.disp.Push([]hourglass.DueItem{{ID: id, At: p.deadline}})
}

// Cancel implements hourglass.Canceler: it stops the orders' runtime timers.
// It never fails; unknown ids are ignored, so it is idempotent. A timer that
// already fired and waits in the dispatcher is still delivered (its close is
// then a no-op).
func (s *Scheduler) Cancel(_ context.Context, orderIDs []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range orderIDs {
		if p, ok := s.timers[id]; ok {
			p.timer.Stop()
			delete(s.timers, id)
		}
	}
	return nil
}

// Pending returns the number of armed timers (not counting fired timers
// waiting for delivery), for the hourglass_timers_pending gauge.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.timers)
}

// Run implements hourglass.Scheduler: the runtime fires the timers; Run
// runs the dispatcher's workers, which deliver fired timers to deliver and
// retry a failed delivery with backoff. It never fails; it returns nil once
// ctx ends and the workers have stopped. Timers firing while Run is not
// running wait in the dispatcher for the next Run.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	s.disp.Run(ctx, deliver)
	return nil
}

// Close implements hourglass.Scheduler: it stops every runtime timer so none
// fires after the scheduler is gone. It returns nil and is idempotent; later
// Schedule calls fail with ErrClosed.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.timers {
		p.timer.Stop()
		delete(s.timers, id)
	}
	s.closed = true
	return nil
}
