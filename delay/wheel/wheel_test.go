package wheel_test

import (
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/wheel"
	"github.com/hourglass/hourglass/hourglasstest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, _ string) hourglass.Scheduler {
			s := wheel.New(wheel.Config{})
			t.Cleanup(func() { s.Close() })
			return s
		},
		MaxLateness: 100 * 1e6, // 100 ms, under the suite's light load
	})
}
