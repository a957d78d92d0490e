// Package wheel is the default delay mechanism: hourglass's own hierarchical
// timing wheel driven by the shared in-memory timing loop (package
// timing/timerloop, NewWheel), which sleeps until the wheel's next
// non-empty slot. Timers live in memory; the engine pages the next window
// of deadlines in from the database (FeedWindow), so a restart loses
// nothing and memory follows the order rate, not the pending count.
// Schedule and Cancel are O(1); about 36 bytes per timer.
//
// It imports only the root package and the timing core; only the wiring
// (package delay, cmd) imports it.
package wheel

import (
	"log/slog"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing/dispatch"
	"github.com/hourglass/hourglass/timing/timerloop"
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
	return timerloop.NewWheel(timerloop.Config{Name: "wheel", Clock: cfg.Clock, Logger: cfg.Logger, Dispatch: cfg.Dispatch})
}
