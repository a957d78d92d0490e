package wheel_test

import (
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/wheel"
	"github.com/hourglass/hourglass/hourglasstest/outage"
)

// TestOutageHarness runs the outage harness with the wheel and a no-op
// outage: the baseline every broker's outage test is compared with.
func TestOutageHarness(t *testing.T) {
	t.Parallel()
	outage.Run(t, outage.Config{
		Open:   func(t *testing.T, _ hourglass.Store) hourglass.Scheduler { return wheel.New(wheel.Config{}) },
		Outage: func(t *testing.T) {},
		Orders: 200,
	})
}
