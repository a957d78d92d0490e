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
		MaxLateness: 250 * 1e6, // 250 ms: under -race, beside the store suites on 2 cores; lateness is measured by hourglass bench
	})
}
