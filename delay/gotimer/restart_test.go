package gotimer_test

import (
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/gotimer"
	"github.com/hourglass/hourglass/hourglasstest/outage"
)

// TestRestartLosesNothing: a restart mid-load loses no order, closes none
// twice and none early (see outage.Restart).
func TestRestartLosesNothing(t *testing.T) {
	t.Parallel()
	outage.Restart(t, func() hourglass.Scheduler { return gotimer.New(gotimer.Config{}) })
}
