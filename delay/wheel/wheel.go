// Package wheel is the default delay mechanism: hourglass's own hierarchical
// timing wheel (package timingwheel) driven by the shared in-memory timing
// loop (package timerloop), which sleeps until the wheel's next non-empty
// slot. Timers live in memory; the engine pages the next window of deadlines
// in from the database (FeedWindow), so a restart loses nothing and memory
// follows the order rate, not the pending count. Schedule and Cancel are
// O(1); about 36 bytes per timer.
package wheel

import (
	"log/slog"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/dispatch"
	"github.com/hourglass/hourglass/delay/timerloop"
	"github.com/hourglass/hourglass/timingwheel"
)

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	Clock    hourglass.Clock
	Logger   *slog.Logger
	Dispatch dispatch.Config
}

// New returns an empty wheel scheduler. It cannot fail: there is nothing to
// connect to.
func New(cfg Config) *timerloop.Scheduler {
	clock := cfg.Clock
	if clock == nil {
		clock = hourglass.SystemClock{}
	}
	w := timers{timingwheel.New(hourglass.UnixMilli(clock.Now()))}
	return timerloop.New(w, timerloop.Config{Name: "wheel", Clock: clock, Logger: cfg.Logger, Dispatch: cfg.Dispatch})
}

// timers adapts the wheel (uint64 ids) to timerloop.Timers.
type timers struct{ w *timingwheel.Wheel }

func (t timers) Add(id, deadline int64) { t.w.Add(uint64(id), deadline) }
func (t timers) Remove(id int64) bool   { return t.w.Cancel(uint64(id)) }
func (t timers) Len() int               { return t.w.Len() }
func (t timers) Next() (int64, bool)    { return t.w.NextDeadline() }
func (t timers) PopDue(now int64, fire func(id, deadline int64)) int {
	return t.w.Advance(now, func(id uint64, deadline int64) { fire(int64(id), deadline) })
}
