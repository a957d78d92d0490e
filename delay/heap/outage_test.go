package heap_test

import (
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/heap"
	"github.com/hourglass/hourglass/hourglasstest/outage"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestOutage would stop the mechanism's broker mid-load; the heap has none,
// so there is nothing to stop. What can fail is the process, and
// TestRestartLosesNothing covers that.
func TestOutage(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	t.Skip("heap is in memory: it has no broker to stop (see TestRestartLosesNothing and TestOutageHarness)")
}

// TestOutageHarness runs the outage harness with the heap and a no-op
// outage, as the wheel does: the whole close path, checked for lost and
// doubled closes.
func TestOutageHarness(t *testing.T) {
	t.Parallel()
	outage.Run(t, outage.Config{
		Open:   func(t *testing.T, _ hourglass.Store) hourglass.Scheduler { return heap.New(heap.Config{}) },
		Outage: func(t *testing.T) {},
		Orders: 200,
	})
}
