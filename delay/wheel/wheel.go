// Package wheel is the default delay mechanism: hourglass's own hierarchical
// timing wheel (package timingwheel) driven by one goroutine that sleeps
// until the next non-empty slot. Timers live in memory; the engine pages the
// next window of deadlines in from the database (FeedWindow), so a restart
// loses nothing and memory follows the order rate, not the pending count.
package wheel

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/dispatch"
	"github.com/hourglass/hourglass/timingwheel"
)

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	Clock    hourglass.Clock
	Logger   *slog.Logger
	Dispatch dispatch.Config
}

// Scheduler is the timing-wheel delay mechanism. Safe for concurrent use.
type Scheduler struct {
	clock hourglass.Clock
	disp  *dispatch.Dispatcher

	mu         sync.Mutex
	wheel      *timingwheel.Wheel
	sleepUntil int64 // the deadline the timing loop sleeps towards
	wake       chan struct{}
}

var (
	_ hourglass.Scheduler = (*Scheduler)(nil)
	_ hourglass.Canceler  = (*Scheduler)(nil)
)

// New returns an empty wheel scheduler.
func New(cfg Config) *Scheduler {
	if cfg.Clock == nil {
		cfg.Clock = hourglass.SystemClock{}
	}
	if cfg.Dispatch.Logger == nil {
		cfg.Dispatch.Logger = cfg.Logger
	}
	return &Scheduler{
		clock: cfg.Clock,
		disp:  dispatch.New(cfg.Dispatch),
		wheel: timingwheel.New(hourglass.UnixMilli(cfg.Clock.Now())),
		wake:  make(chan struct{}, 1),
	}
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "wheel", Feed: hourglass.FeedWindow}
}

// Schedule implements hourglass.Scheduler; it never fails.
func (s *Scheduler) Schedule(_ context.Context, timers []hourglass.Timer) error {
	earliest := int64(1<<63 - 1)
	s.mu.Lock()
	for _, t := range timers {
		d := hourglass.UnixMilli(t.Deadline)
		s.wheel.Add(uint64(t.OrderID), d)
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

// Cancel implements hourglass.Canceler; it never fails.
func (s *Scheduler) Cancel(_ context.Context, orderIDs []int64) error {
	s.mu.Lock()
	for _, id := range orderIDs {
		s.wheel.Cancel(uint64(id))
	}
	s.mu.Unlock()
	return nil
}

// Pending returns the number of timers in the wheel.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wheel.Len()
}

// Run implements hourglass.Scheduler: it sleeps until the wheel's next
// deadline (or until Schedule adds an earlier one), advances the wheel and
// hands what fired to the dispatcher's workers.
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
		s.wheel.Advance(nowMs, func(id uint64, d int64) {
			fired = append(fired, hourglass.Timer{OrderID: int64(id), Deadline: hourglass.FromUnixMilli(d)})
		})
		next, ok := s.wheel.NextDeadline()
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
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	}
}

// Close implements hourglass.Scheduler; it holds no connections.
func (s *Scheduler) Close() error { return nil }
