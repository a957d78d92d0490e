// Package timerloop (part of the timing core, package timing) is the
// scheduler shared by everything hourglass times in memory (the engine's
// default timing, webhook delivery attempts, the wheel and heap delay
// mechanisms): one goroutine sleeps until the earliest deadline
// held by a timer structure (or until Schedule adds an earlier one), pops
// what is due and hands it to a dispatch.Dispatcher, whose workers deliver
// it in batches and retry a failed delivery with backoff, so a slow database
// never stalls the timing loop. The mechanisms differ only in the structure
// (a hierarchical timing wheel, a binary heap), which implements Timers.
//
// Timers live only in memory (Info().Durable is false): the engine feeds the
// scheduler the next window of pending orders from the database
// (FeedWindow) and pages it in again after a restart.
package timerloop

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing/dispatch"
)

// Timers is an in-memory timer structure keyed by order id, with deadlines
// in unix milliseconds. It need not be safe for concurrent use: the
// Scheduler holds a mutex around every call.
type Timers interface {
	// Add schedules id at deadline, replacing an earlier deadline of id.
	Add(id, deadline int64)
	// Remove drops id; it reports whether id was held.
	Remove(id int64) bool
	// Len is the number of timers held.
	Len() int
	// PopDue removes every timer due at now (deadline <= now), calling fire
	// for each, and returns how many fired.
	PopDue(now int64, fire func(id, deadline int64)) int
	// Next returns a time no later than the earliest deadline held, at
	// which PopDue should be called next; false when empty.
	Next() (int64, bool)
}

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	// Name is the mechanism's name in Info.
	Name string
	// Clock gives "now" and the timer to the timing loop (default the
	// system clock).
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Dispatch configures the workers that deliver fired timers.
	Dispatch dispatch.Config
}

// Scheduler drives a Timers structure. All its methods are safe for
// concurrent use; Run must not be called twice at once.
type Scheduler struct {
	name  string
	clock hourglass.TimerClock
	disp  *dispatch.Dispatcher

	mu         sync.Mutex
	timers     Timers
	sleepUntil int64 // the deadline the timing loop sleeps towards (unix ms)
	// handing is the earliest deadline of the timers popped and not yet in
	// the dispatcher (unix ms; MaxInt64 when none), so Backlog sees them.
	handing int64
	wake    chan struct{}
}

var (
	_ hourglass.Scheduler = (*Scheduler)(nil)
	_ hourglass.Canceler  = (*Scheduler)(nil)
)

// New returns a scheduler over timers, which must be empty and is owned by
// the scheduler from now on.
func New(timers Timers, cfg Config) *Scheduler {
	clock := hourglass.WithTimers(cfg.Clock)
	if cfg.Dispatch.Logger == nil {
		cfg.Dispatch.Logger = cfg.Logger
	}
	if cfg.Dispatch.Clock == nil {
		cfg.Dispatch.Clock = clock
	}
	return &Scheduler{
		name:       cfg.Name,
		clock:      clock,
		disp:       dispatch.New(cfg.Dispatch),
		timers:     timers,
		sleepUntil: math.MaxInt64, // until Run starts, any Schedule may wake it
		handing:    math.MaxInt64,
		wake:       make(chan struct{}, 1),
	}
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: s.name, Feed: hourglass.FeedWindow}
}

// Schedule implements hourglass.Scheduler; it never fails. Scheduling an
// order already held replaces its deadline (an order's deadline never
// changes, so this only drops a duplicate): it is idempotent.
func (s *Scheduler) Schedule(_ context.Context, timers []hourglass.DueItem) error {
	if len(timers) == 0 {
		return nil
	}
	earliest := int64(math.MaxInt64)
	s.mu.Lock()
	for _, t := range timers {
		d := hourglass.UnixMilli(t.At)
		s.timers.Add(t.ID, d)
		earliest = min(earliest, d)
	}
	wake := earliest < s.sleepUntil
	s.mu.Unlock()
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Cancel implements hourglass.Canceler. It never fails; unknown ids are
// ignored, so it is idempotent. A timer that already fired and waits in the
// dispatcher is still delivered (its close is then a no-op).
func (s *Scheduler) Cancel(_ context.Context, orderIDs []int64) error {
	s.mu.Lock()
	for _, id := range orderIDs {
		s.timers.Remove(id)
	}
	s.mu.Unlock()
	return nil
}

// Pending returns the number of timers held (not counting fired timers
// waiting for delivery), for the hourglass_timers_pending gauge.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timers.Len()
}

// Queued returns the number of fired timers waiting for a worker.
func (s *Scheduler) Queued() int { return s.disp.Len() }

// Upcoming appends to ids those of the first n fired timers waiting for a
// worker, in the order the workers will take them, and returns it.
func (s *Scheduler) Upcoming(ids []int64, n int) []int64 { return s.disp.Upcoming(ids, n) }

// Backlog returns the earliest deadline among the due timers not yet
// delivered (fired and waiting for or in delivery, or held and due: the
// loop is about to fire them) and when the close path last made progress
// (a delivery completed, or the dispatcher went from idle to busy); ok is
// false when there is no such timer. The engine's sweeper leaves orders
// due at or after oldest to the close path while it progresses: in a burst
// they are being worked through, not lost.
func (s *Scheduler) Backlog() (oldest, progress time.Time, ok bool) {
	nowMs := hourglass.UnixMilli(s.clock.Now())
	// The timing loop's state first, then the dispatcher's: a due timer is
	// held, or being handed over, or in the dispatcher, and it only moves
	// in that order, so reading in that order cannot miss it.
	s.mu.Lock()
	next, held := s.timers.Next()
	handing := s.handing
	s.mu.Unlock()
	d, p, ok := s.disp.Oldest()
	if !ok {
		p = nowMs // nothing in delivery: held due timers are fired right now
	}
	if held && next <= nowMs && (!ok || next < d) {
		d, ok = next, true
	}
	if handing != math.MaxInt64 && (!ok || handing < d) {
		d, ok = handing, true
	}
	if !ok {
		return time.Time{}, time.Time{}, false
	}
	return hourglass.FromUnixMilli(d), hourglass.FromUnixMilli(p), true
}

// Run implements hourglass.Scheduler: it sleeps until the next deadline (or
// until Schedule adds an earlier one), pops what is due and hands it to the
// dispatcher's workers, which call deliver. A failed delivery is retried by
// the dispatcher, so Run itself never fails; it returns nil once ctx ends
// and the workers have stopped.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.disp.Run(ctx, deliver) }()
	defer wg.Wait()
	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	var fired []hourglass.DueItem
	for {
		now := s.clock.Now()
		nowMs := hourglass.UnixMilli(now)
		fired = fired[:0]
		s.mu.Lock()
		s.timers.PopDue(nowMs, func(id, deadline int64) {
			fired = append(fired, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(deadline)})
			s.handing = min(s.handing, deadline)
		})
		next, ok := s.timers.Next()
		if !ok {
			next = nowMs + time.Hour.Milliseconds()
		}
		s.sleepUntil = next
		s.mu.Unlock()
		// Deliver in (deadline, id) order: the wheel fires a slot last in,
		// first out, and a burst closed in descending id order splits the
		// database's index pages on every batch (ids close together also
		// share table pages, so each batch touches few of them).
		if len(fired) > 1 {
			slices.SortFunc(fired, func(a, b hourglass.DueItem) int {
				return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
			})
		}
		s.disp.Push(fired)
		s.mu.Lock()
		s.handing = math.MaxInt64
		s.mu.Unlock()
		// A deadline of D ms is due at D ms exactly; sleep to that instant.
		wait := hourglass.FromUnixMilli(next).Sub(now)
		if wait <= 0 {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		case <-s.wake:
			timer.Stop()
		}
	}
}

// Close implements hourglass.Scheduler; it holds no connections, so it does
// nothing and returns nil.
func (s *Scheduler) Close() error { return nil }
