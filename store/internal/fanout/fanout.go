// Package fanout runs a store's deferred webhook fan-out. During a burst of
// closes (more closes queued behind a close batch) a store writes the
// batch's events and a durable note (its fanout_pending table) instead of
// their webhook deliveries, so the close transactions stay short; a Loop
// creates those deliveries once the close path is quiet, one note at a
// time, and on every start picks up what a crash left.
package fanout

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing/wait"
)

const (
	// CheckDefault is how often a Loop looks for notes without a wake-up
	// (another process's, or after a failed attempt).
	CheckDefault = time.Second
	// Quiet is how long no write may have deferred (Wake) before a note is
	// fanned out, with no close queued: the closes of a burst commit a few
	// milliseconds apart, each deferring, so the fan-out waits for the
	// burst's end instead of slipping between its batches. Closes that
	// trickle in one at a time (steady state) do not defer and do not hold
	// it: waiting for a quiet close path behind 50 closes a second held a
	// burst's deliveries MaxWait every time.
	Quiet = 50 * time.Millisecond
	// MaxWait bounds how long one look waits for quiet, so a close path
	// that is never quiet delays deliveries but cannot stop them. It is
	// longer than a 100,000-order burst takes to close on a small machine:
	// a note fanned out mid-burst (several thousand rows in one
	// transaction) doubled the API's p99 on MariaDB (51-58 ms with 3 s,
	// 109-127 ms with 1 s, in the same session).
	MaxWait = 3 * time.Second
	poll    = 5 * time.Millisecond
)

// BurstCloses is the number of orders one write closing them marks as part
// of a burst: the engine closes at most 512 orders per batch (its
// CloseBatchDefault), so a write with a full batch or more is one of several
// the close path has in flight.
const BurstCloses = 512

// Burst reports whether a write closing closes orders, with queued more
// closes waiting behind it, is part of a burst, and so leaves its close
// events' deliveries to a Loop. A writer that takes every queued close into
// one transaction sees none queued behind it; its batch's size says it.
// Reminders sent in the same write do not count: only the close events'
// deliveries are deferred (a close event is its order's last, so no later
// event of the order is delivered before it; a reminder's is not), and a
// batch of reminders alone defers nothing. A store that weighs a write by
// its deliveries counts both (batch.Outcome.Fanned).
func Burst(queued, closes int) bool { return closes > 0 && (queued > 0 || closes >= BurstCloses) }

// Queue is what a Loop watches of the store's write queue
// (writequeue.Queue): the closes waiting.
type Queue interface {
	Urgent() int
}

// Loop fans out a store's deferred deliveries: make one with New, run Run
// in a goroutine, and Wake it after a commit that deferred.
type Loop struct {
	// Name prefixes log messages ("postgres").
	Name string
	Log  *slog.Logger
	// Queue is the store's write queue, where closes are urgent.
	Queue Queue
	// One fans out the oldest note (and deletes it, in one transaction),
	// reporting whether there was one.
	One func(ctx context.Context) (found bool, err error)
	// Check is how often Run looks without a wake-up (zero: CheckDefault).
	Check time.Duration
	// Before, if set, is called before each note is fanned out (tests).
	Before func()
	// Count, if set with Counted, counts the notes (the store's
	// FanoutPending); Run tells Counted the count at the start of each look.
	// A failed count is not told (the look's own failure is logged).
	Count    func(ctx context.Context) (int, error)
	Counted  func(n int)
	wake     chan struct{}
	deferred *atomic.Int64        // unix ns: the last Wake
	clock    hourglass.TimerClock // the system clock's: times the checks, the wait for quiet and MaxWait
}

// New returns a Loop with cfg's settings.
func New(cfg Loop) *Loop {
	cfg.wake = make(chan struct{}, 1)
	cfg.deferred = new(atomic.Int64)
	cfg.clock = hourglass.SystemClock{}
	return &cfg
}

// Wake tells Run that a write deferred its deliveries (so a burst is on)
// and has it look for notes, which it fans out once no write has deferred
// for Quiet. Safe for concurrent use, before or during Run.
func (l *Loop) Wake() {
	l.deferred.Store(l.clock.Now().UnixNano())
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run fans out notes until ctx ends: at each wake-up and check, every note
// there is, oldest first, once the close path is quiet. The wait for quiet
// is bounded per look, not per note: MaxWait at most before the first note
// of a look, and whatever is left of it before the others. So bursts that
// keep coming, or a close path that never empties, delay a burst's
// deliveries by MaxWait at most, however many notes it left; waiting per
// note, 40 notes behind a trickle of 50 closes/s waited 2 minutes.
func (l *Loop) Run(ctx context.Context) {
	check := l.Check
	if check <= 0 {
		check = CheckDefault
	}
	tick := l.clock.NewTicker(check)
	defer tick.Stop()
	for {
		l.count(ctx)
		giveUp := l.clock.Now().Add(MaxWait)
		for {
			if !l.waitQuiet(ctx, max(giveUp.Sub(l.clock.Now()), 0)) {
				return
			}
			if l.Before != nil {
				l.Before()
			}
			found, err := l.One(ctx)
			if err != nil {
				if ctx.Err() == nil {
					l.Log.Warn(l.Name+": creating deferred webhook deliveries failed; retrying", "retry_in", check, "err", err)
				}
				break
			}
			if !found {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-tick.C():
		}
	}
}

// count tells Counted how many notes there are, if it can.
func (l *Loop) count(ctx context.Context) {
	if l.Count == nil || l.Counted == nil {
		return
	}
	if n, err := l.Count(ctx); err == nil {
		l.Counted(n)
	}
}

// waitQuiet waits until no close is queued and no write deferred for Quiet,
// at most limit; false when ctx ends.
func (l *Loop) waitQuiet(ctx context.Context, limit time.Duration) bool {
	if limit <= 0 {
		return ctx.Err() == nil
	}
	busy := func() bool {
		return l.Queue.Urgent() > 0 || l.clock.Now().UnixNano()-l.deferred.Load() < int64(Quiet)
	}
	return wait.WhileOn(ctx, l.clock, busy, poll, limit)
}
