package hourglass

import "time"

// Clock is the only source of "now" in hourglass. Components take a Clock in
// their constructor; tests pass a fake one.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// SystemClock is the real clock; it is the one place time.Now is called.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// UnixMilli returns t as unix milliseconds; every stored time is in this unit.
func UnixMilli(t time.Time) int64 { return t.UnixMilli() }

// FromUnixMilli returns the UTC time of unix milliseconds ms.
func FromUnixMilli(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
