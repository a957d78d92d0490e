package hourglass_test

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// fixed is a clock that gives only Now, as a store's test clock does.
type fixed struct{ t time.Time }

func (f fixed) Now() time.Time { return f.t }

func TestWithTimers(t *testing.T) {
	t.Parallel()
	if _, ok := hourglass.WithTimers(nil).(hourglass.SystemClock); !ok {
		t.Fatal("WithTimers(nil) is not the system clock")
	}
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := hourglass.WithTimers(fixed{at})
	if !c.Now().Equal(at) {
		t.Fatalf("Now = %v, want the clock's %v", c.Now(), at)
	}
	// Its timers are the system clock's: they fire although Now stands still.
	select {
	case <-c.NewTimer(time.Millisecond).C():
	case <-time.After(10 * time.Second):
		t.Fatal("the timer of a Now-only clock did not fire")
	}
	if got := hourglass.WithTimers(c); got != c {
		t.Fatal("WithTimers wrapped a TimerClock again")
	}
}
