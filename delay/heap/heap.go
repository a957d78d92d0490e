// Package heap is an in-memory delay mechanism built on a delay queue: a
// binary min-heap of order deadlines, the structure behind Java's
// DelayQueue, with an index from order id to heap position so that
// cancelling or replacing a timer costs O(log n) instead of a linear scan.
//
// The heap is driven by the shared in-memory timing loop (package
// timerloop): one goroutine sleeps until the deadline at the head of the
// heap, is woken early when Schedule adds an earlier one, and hands what is
// due to dispatch workers that deliver in batches and retry with backoff.
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
	"log/slog"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing/dispatch"
	"github.com/hourglass/hourglass/timing/timerloop"
)

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	// Clock gives "now" to the timing loop (default the system clock).
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Dispatch configures the workers that deliver fired timers.
	Dispatch dispatch.Config
}

// New returns an empty heap scheduler. It cannot fail: there is nothing to
// connect to.
func New(cfg Config) *timerloop.Scheduler {
	return timerloop.New(newQueue(), timerloop.Config{Name: "heap", Clock: cfg.Clock, Logger: cfg.Logger, Dispatch: cfg.Dispatch})
}

var _ timerloop.Timers = (*queue)(nil)
