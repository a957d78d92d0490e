// Package timing is hourglass's in-memory time: everything that waits takes
// its time from a clock (hourglass.TimerClock), so a test drives it with a
// fake clock instead of sleeping. This package holds the three waits every
// long-running part shares: Sleep, Backoff and Supervisor (a goroutine
// restarted with backoff). Its subpackages hold the rest of the timing
// core:
//
//   - wheel: the hierarchical timing wheel (time is an input; no goroutines);
//   - timerloop: the timing loop that sleeps until a timer structure's next
//     deadline and hands what is due to
//   - dispatch: the workers that deliver fired timers in batches, retrying;
//   - window: the loader that pages what falls due soon from the database
//     into a scheduler;
//   - wait: the polling wait of work that gives way to more urgent work.
//
// The timing core imports only the root package (and itself): the engine,
// webhook delivery, the cluster and the delay mechanisms import it, never
// the reverse.
package timing

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// Sleep waits d on clock, or until ctx ends. It returns nil after d, or
// ctx's error when ctx ended first (at once if it already had).
func Sleep(ctx context.Context, clock hourglass.TimerClock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Backoff is a capped exponential backoff: each Next doubles the wait, from
// Min, up to Max. The zero value waits 0 for ever: set Min and Max. It is
// not safe for concurrent use (each retry loop holds its own).
type Backoff struct {
	Min, Max time.Duration
	last     time.Duration
}

// Next returns the wait before the next attempt after a failure:
// min(max(2 × the previous wait, Min), Max).
func (b *Backoff) Next() time.Duration {
	b.last = min(max(2*b.last, b.Min), b.Max)
	return b.last
}

// Reset starts the backoff over, after a success: the next wait is Min.
func (b *Backoff) Reset() { b.last = 0 }

// Supervisor runs a function again after it fails, with backoff: the one
// restart loop of hourglass's long-running parts (the delay mechanism under
// the engine, a watch of the database, a first load). The zero value of
// each field means its default.
type Supervisor struct {
	// Clock times the waits (default the system clock).
	Clock hourglass.TimerClock
	// Backoff spaces the restarts; set its Min and Max.
	Backoff Backoff
	// ResetAfter, when positive, starts the backoff over after a run that
	// lasted at least this long before it failed: it had recovered.
	ResetAfter time.Duration
	// Failed, when set, is told each failure with the wait before the
	// restart: log it, count it.
	Failed func(err error, retryIn time.Duration)
}

// Run calls run until it returns nil or ctx ends; after each error it calls
// Failed and waits the backoff. A run meant to last until ctx ends returns
// an error when it stops early. Run returns nil when run succeeded (even as
// ctx ended), or ctx's error once ctx ended; an error that ctx's end caused
// is not reported to Failed. One Supervisor value runs one loop at a time.
func (s *Supervisor) Run(ctx context.Context, run func(context.Context) error) error {
	clock := hourglass.WithTimers(s.Clock)
	for {
		start := clock.Now()
		err := run(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.ResetAfter > 0 && clock.Now().Sub(start) >= s.ResetAfter {
			s.Backoff.Reset()
		}
		wait := s.Backoff.Next()
		if s.Failed != nil {
			s.Failed(err, wait)
		}
		if err := Sleep(ctx, clock, wait); err != nil {
			return err
		}
	}
}
