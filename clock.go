package hourglass

import "time"

// Clock is the only source of "now" in hourglass. Components take a Clock in
// their constructor; tests pass a fake one.
//
// A Clock that also implements TimerClock owns the waiting too: every
// component that sleeps, ticks or times out takes its timers from the
// clock it was given (see WithTimers), so a test that drives a fake clock
// (hourglasstest.Clock) drives the timers with it instead of sleeping. A
// Clock that gives only Now (a store's clock, a test's clock shifted from
// the real one) waits on the system clock's timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// TimerClock is a Clock that owns timers: they fire when the clock's time
// reaches their deadline, not when a wall clock does. It must be safe for
// concurrent use. SystemClock and hourglasstest.Clock implement it.
type TimerClock interface {
	Clock
	// NewTimer returns a timer whose channel receives the clock's time
	// once d has passed on the clock (at once for d <= 0), like
	// time.NewTimer.
	NewTimer(d time.Duration) ClockTimer
	// AfterFunc calls f in its own goroutine once d has passed on the
	// clock, like time.AfterFunc; the timer's channel is nil.
	AfterFunc(d time.Duration, f func()) ClockTimer
	// NewTicker returns a ticker that sends the clock's time every d
	// (which must be positive), dropping ticks a slow reader misses, like
	// time.NewTicker.
	NewTicker(d time.Duration) ClockTicker
}

// ClockTimer is a timer of a TimerClock, with the semantics of *time.Timer
// since Go 1.23: after Stop or Reset returns, no stale time is received
// from C. It is safe for concurrent use.
type ClockTimer interface {
	// C returns the channel the time is sent on (nil for AfterFunc).
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped
	// it (false: it had fired or been stopped).
	Stop() bool
	// Reset makes the timer fire after d from now instead; it reports
	// whether the timer was active.
	Reset(d time.Duration) bool
}

// ClockTicker is a ticker of a TimerClock, with the semantics of
// *time.Ticker. It is safe for concurrent use.
type ClockTicker interface {
	// C returns the channel the ticks are sent on.
	C() <-chan time.Time
	// Stop turns the ticker off; no tick is received after it returns.
	Stop()
	// Reset stops the ticker and sets its period to d (positive); the
	// next tick comes d from now.
	Reset(d time.Duration)
}

// SystemClock is the real clock; it is the one place time.Now is called,
// and its timers are the runtime's.
type SystemClock struct{}

var _ TimerClock = SystemClock{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns time.NewTimer(d).
func (SystemClock) NewTimer(d time.Duration) ClockTimer { return sysTimer{time.NewTimer(d)} }

// AfterFunc returns time.AfterFunc(d, f).
func (SystemClock) AfterFunc(d time.Duration, f func()) ClockTimer {
	return sysTimer{time.AfterFunc(d, f)}
}

// NewTicker returns time.NewTicker(d); it panics if d <= 0.
func (SystemClock) NewTicker(d time.Duration) ClockTicker { return sysTicker{time.NewTicker(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time        { return s.t.C }
func (s sysTimer) Stop() bool                 { return s.t.Stop() }
func (s sysTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }

type sysTicker struct{ t *time.Ticker }

func (s sysTicker) C() <-chan time.Time   { return s.t.C }
func (s sysTicker) Stop()                 { s.t.Stop() }
func (s sysTicker) Reset(d time.Duration) { s.t.Reset(d) }

// WithTimers returns c as a TimerClock: c itself when it owns timers;
// SystemClock when c is nil; otherwise a clock whose Now is c's and whose
// timers are the system clock's (a clock that only shifts or stops now,
// such as a test's, times its waits in real time, as before timers were
// the clock's).
func WithTimers(c Clock) TimerClock {
	switch c := c.(type) {
	case nil:
		return SystemClock{}
	case TimerClock:
		return c
	default:
		return nowOnly{Clock: c}
	}
}

// nowOnly takes Now from a Clock and timers from the system clock.
type nowOnly struct {
	Clock
	SystemClock
}

func (n nowOnly) Now() time.Time { return n.Clock.Now() }

// UnixMilli returns t as unix milliseconds; every stored time is in this unit.
func UnixMilli(t time.Time) int64 { return t.UnixMilli() }

// FromUnixMilli returns the UTC time of unix milliseconds ms.
func FromUnixMilli(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// CeilMilli returns t rounded up to the millisecond, in UTC: a deadline of
// finer precision as hourglass times it (never early).
func CeilMilli(t time.Time) time.Time {
	ms := UnixMilli(t)
	if t.After(FromUnixMilli(ms)) {
		ms++
	}
	return FromUnixMilli(ms)
}
