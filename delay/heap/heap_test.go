package heap_test

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/heap"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestConformance runs the scheduler suite. The heap has no service to
// find: it is in memory, so the durable parts of the suite are skipped (the
// engine reloads the window after a crash; see TestRestartLosesNothing).
func TestConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, _ string) hourglass.Scheduler {
			s := heap.New(heap.Config{})
			t.Cleanup(func() { s.Close() })
			return s
		},
		MaxLateness: 250 * time.Millisecond, // under -race, beside the store suites on 2 cores; lateness is measured by hourglass bench
	})
}
