// Package hourglasstest holds test helpers shared by hourglass's packages:
// a fake clock and conformance suites that every Store implementation runs.
package hourglasstest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// Clock is a fake hourglass.TimerClock that only moves when told: Advance
// and Set move it and fire the timers and tickers that fall due, in the
// order of their deadlines, and BlockUntil waits until the code under test
// sleeps on it. So a test says "now" instead of sleeping. It is safe for
// concurrent use.
//
// Its timers behave as the runtime's since Go 1.23 (no stale tick after
// Stop or Reset), with two differences a test relies on: an AfterFunc
// callback that falls due during Advance or Set runs in the goroutine that
// moves the clock, before the next timer fires and before Advance returns
// (one armed with d <= 0 runs at once in its own goroutine, as the
// runtime's would); and a ticker delivers at most one tick per Advance
// that its reader has not taken (the runtime drops those too).
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64    // orders waiters due at the same instant: first armed, first fired
	waiters []*waiter // active timers and tickers
	// changed is closed, and replaced, whenever waiters changes.
	changed chan struct{}
}

var _ hourglass.TimerClock = (*Clock)(nil)

// NewClock returns a clock stopped at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now, changed: make(chan struct{})} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, firing every timer due at or before t (in
// deadline order) when t is later than now. A t earlier than now sets the
// clock back and fires nothing.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	if !t.After(c.now) {
		c.now = t
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.advanceTo(t)
}

// Advance moves the clock forward by d, firing every timer due by then in
// deadline order: the clock reads each timer's deadline when it fires, and
// now+d when Advance returns.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.advanceTo(target)
}

// Sleepers returns how many timers and tickers are armed on the clock
// (not stopped, and for timers not yet fired).
func (c *Clock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// Next returns the earliest deadline among the armed timers and tickers;
// false when none is armed.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.earliestLocked(); w != nil {
		return w.at, true
	}
	return time.Time{}, false
}

// BlockUntil waits until at least n timers and tickers are armed on the
// clock: the goroutines under test sleep on it, so an Advance now reaches
// them. It returns an error saying how many were armed when ctx ended
// first.
func (c *Clock) BlockUntil(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		got, changed := len(c.waiters), c.changed
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hourglasstest: %d of %d sleepers on the fake clock: %w", got, n, ctx.Err())
		case <-changed:
		}
	}
}

// NewTimer implements hourglass.TimerClock.
func (c *Clock) NewTimer(d time.Duration) hourglass.ClockTimer {
	w := &waiter{c: c, ch: make(chan time.Time, 1)}
	c.arm(w, d, false)
	return fakeTimer{w}
}

// AfterFunc implements hourglass.TimerClock; see Clock for when f runs.
func (c *Clock) AfterFunc(d time.Duration, f func()) hourglass.ClockTimer {
	w := &waiter{c: c, f: f}
	c.arm(w, d, false)
	return fakeTimer{w}
}

// NewTicker implements hourglass.TimerClock; it panics if d <= 0.
func (c *Clock) NewTicker(d time.Duration) hourglass.ClockTicker {
	if d <= 0 {
		panic("hourglasstest: non-positive interval for NewTicker")
	}
	w := &waiter{c: c, ch: make(chan time.Time, 1)}
	c.arm(w, d, true)
	return fakeTicker{w}
}

// waiter is an armed timer or ticker.
type waiter struct {
	c      *Clock
	at     time.Time
	seq    uint64
	period time.Duration  // tickers only
	ch     chan time.Time // nil for AfterFunc; capacity 1
	f      func()
}

// arm (re)arms w to fire d from now, as a ticker of that period when
// ticker is set; a timer with d <= 0 fires at once. w must not be armed.
func (c *Clock) arm(w *waiter, d time.Duration, ticker bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ticker {
		w.period = d
	}
	if d <= 0 && !ticker {
		if w.f != nil {
			go w.f()
		} else {
			w.send(c.now)
		}
		return
	}
	c.seq++
	w.at, w.seq = c.now.Add(d), c.seq
	c.waiters = append(c.waiters, w)
	c.changedLocked()
}

// disarm removes w and drops a tick it sent and nobody took; it reports
// whether w was armed. Ticks are sent under c.mu, so none arrives after it.
func (c *Clock) disarm(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.waiters, w)
	if i >= 0 {
		c.waiters = slices.Delete(c.waiters, i, i+1)
		c.changedLocked()
	}
	if w.ch != nil {
		select {
		case <-w.ch:
		default:
		}
	}
	return i >= 0
}

func (c *Clock) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Clock) earliestLocked() *waiter {
	var first *waiter
	for _, w := range c.waiters {
		if first == nil || w.at.Before(first.at) || (w.at.Equal(first.at) && w.seq < first.seq) {
			first = w
		}
	}
	return first
}

// advanceTo fires, one at a time and in deadline order, every waiter due
// at or before target, setting the clock to each one's deadline, then sets
// it to target.
func (c *Clock) advanceTo(target time.Time) {
	for {
		c.mu.Lock()
		w := c.earliestLocked()
		if w == nil || w.at.After(target) {
			if target.After(c.now) {
				c.now = target
			}
			c.mu.Unlock()
			return
		}
		if w.at.After(c.now) {
			c.now = w.at
		}
		now := c.now
		if w.period > 0 {
			if !w.send(now) {
				// Its reader has not taken the last tick: the ticks until
				// target would be dropped too.
				w.at = w.at.Add(w.period * (target.Sub(w.at)/w.period + 1))
			} else {
				w.at = w.at.Add(w.period)
			}
			c.seq++
			w.seq = c.seq
			c.mu.Unlock()
			continue
		}
		c.waiters = slices.DeleteFunc(c.waiters, func(o *waiter) bool { return o == w })
		c.changedLocked()
		if w.f == nil {
			w.send(now)
		}
		c.mu.Unlock()
		if w.f != nil {
			w.f()
		}
	}
}

// send delivers now on w's channel unless a tick is already waiting there.
func (w *waiter) send(now time.Time) bool {
	select {
	case w.ch <- now:
		return true
	default:
		return false
	}
}

type fakeTimer struct{ w *waiter }

func (t fakeTimer) C() <-chan time.Time { return t.w.ch }
func (t fakeTimer) Stop() bool          { return t.w.c.disarm(t.w) }
func (t fakeTimer) Reset(d time.Duration) bool {
	armed := t.w.c.disarm(t.w)
	t.w.c.arm(t.w, d, false)
	return armed
}

type fakeTicker struct{ w *waiter }

func (t fakeTicker) C() <-chan time.Time { return t.w.ch }
func (t fakeTicker) Stop()               { t.w.c.disarm(t.w) }
func (t fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("hourglasstest: non-positive interval for Ticker.Reset")
	}
	t.w.c.disarm(t.w)
	t.w.c.arm(t.w, d, true)
}
