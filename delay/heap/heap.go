// Package heap is an in-memory delay mechanism built on a delay queue: a
// binary min-heap of order deadlines, the structure behind Java's
// DelayQueue, with an index from order id to heap position so that
// cancelling or replacing a timer costs O(log n) instead of a linear scan.
//
// One goroutine (Run) sleeps until the deadline at the head of the heap. It
// is woken early when Schedule adds a deadline earlier than the one it sleeps
// towards, then pops every timer that is due and hands them to a
// dispatch.Dispatcher, whose workers deliver them in batches and retry a
// failed delivery with backoff, so a slow database never stalls the timing
// loop.
//
// Timers live only in memory (Info().Durable is false): the engine feeds the
// heap the next window of pending orders from the database (FeedWindow) and
// pages it in again after a restart, so a crash loses nothing and memory
// follows the order rate, not the number of pending orders.
//
// Costs, for n timers held: Schedule O(log n) per timer, Cancel O(log n),
// each fired timer O(log n); about 55 bytes per timer (the heap entry and its
// index entry; see BenchmarkMemoryPerTimer).
package heap

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/dispatch"
)

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	// Clock gives "now" to the timing loop (default the system clock).
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Dispatch configures the workers that deliver fired timers.
	Dispatch dispatch.Config
}

// Scheduler is the delay-queue mechanism. All its methods are safe for
// concurrent use; Run must not be called twice at once.
type Scheduler struct {
	clock hourglass.Clock
	disp  *dispatch.Dispatcher

	mu         sync.Mutex
	queue      *queue
	sleepUntil int64 // the deadline the timing loop sleeps towards (unix ms)
	wake       chan struct{}
}

var (
	_ hourglass.Scheduler = (*Scheduler)(nil)
	_ hourglass.Canceler  = (*Scheduler)(nil)
)

// New returns an empty heap scheduler. It cannot fail: there is nothing to
// connect to.
func New(cfg Config) *Scheduler {
	if cfg.Clock == nil {
		cfg.Clock = hourglass.SystemClock{}
	}
	if cfg.Dispatch.Logger == nil {
		cfg.Dispatch.Logger = cfg.Logger
	}
	return &Scheduler{
		clock:      cfg.Clock,
		disp:       dispatch.New(cfg.Dispatch),
		queue:      newQueue(),
		sleepUntil: math.MaxInt64, // until Run starts, any Schedule may wake it
		wake:       make(chan struct{}, 1),
	}
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "heap", Feed: hourglass.FeedWindow}
}

// Schedule implements hourglass.Scheduler; it never fails. Scheduling an
// order the heap already holds replaces its deadline (an order's deadline
// never changes, so this only drops a duplicate); it is idempotent.
func (s *Scheduler) Schedule(_ context.Context, timers []hourglass.Timer) error {
	if len(timers) == 0 {
		return nil
	}
	earliest := int64(math.MaxInt64)
	s.mu.Lock()
	for _, t := range timers {
		d := hourglass.UnixMilli(t.Deadline)
		s.queue.Add(t.OrderID, d)
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

// Cancel implements hourglass.Canceler: it drops the orders' timers in
// O(log n) each. It never fails; unknown ids are ignored, so it is
// idempotent. A timer that already fired and waits in the dispatcher is
// still delivered (its close is then a no-op).
func (s *Scheduler) Cancel(_ context.Context, orderIDs []int64) error {
	s.mu.Lock()
	for _, id := range orderIDs {
		s.queue.Remove(id)
	}
	s.mu.Unlock()
	return nil
}

// Pending returns the number of timers in the heap (not counting fired
// timers waiting for delivery), for the hourglass_timers_pending gauge.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.Len()
}

// Run implements hourglass.Scheduler: it sleeps until the head's deadline
// (or until Schedule adds an earlier one), pops what is due and hands it to
// the dispatcher's workers, which call deliver. A failed delivery is retried
// with backoff by the dispatcher, so Run itself never fails; it returns nil
// once ctx ends and the workers have stopped.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.disp.Run(ctx, deliver) }()
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var fired []hourglass.Timer
	for {
		now := s.clock.Now()
		nowMs := hourglass.UnixMilli(now)
		fired = fired[:0]
		s.mu.Lock()
		s.queue.PopDue(nowMs, func(id, deadline int64) {
			fired = append(fired, hourglass.Timer{OrderID: id, Deadline: hourglass.FromUnixMilli(deadline)})
		})
		next, ok := s.queue.Next()
		if !ok {
			next = nowMs + time.Hour.Milliseconds()
		}
		s.sleepUntil = next
		s.mu.Unlock()
		s.disp.Push(fired)
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
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		}
	}
}

// Close implements hourglass.Scheduler; the heap holds no connections, so it
// does nothing and returns nil.
func (s *Scheduler) Close() error { return nil }
