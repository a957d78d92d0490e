package asynqpeer

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestScheduler runs the conformance suite on asynq at its tuned settings.
// asynq's lateness is the point of the comparison, not a defect: the suite's
// limit is set high and what it measures is logged.
func TestScheduler(t *testing.T) {
	url := hourglasstest.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", URLDefault)
	var mu sync.Mutex
	queues := map[string]bool{}
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler {
			cfg := Tuned(url, ns)
			cfg.ShutdownTimeout = time.Second // the suite kills a consumer mid-batch
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
			s, err := Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			first := !queues[ns]
			queues[ns] = true
			mu.Unlock()
			if first {
				// Registered before the scheduler's own Close, so it runs
				// after every scheduler on ns has closed.
				t.Cleanup(func() { dropQueue(t, url, ns) })
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		// Deadlines are rounded up to the second: up to 1 s, plus the
		// forwarder's and the workers' 50 ms polls and the load of the test.
		MaxLateness: 3 * time.Second,
		Redelivery:  5 * time.Second,
	})
}

func dropQueue(t *testing.T, url, queue string) {
	s, err := Open(context.Background(), Config{URL: url, Queue: queue, DropOnClose: true})
	if err != nil {
		t.Logf("drop queue %s: %v", queue, err)
		return
	}
	if err := s.Close(); err != nil {
		t.Logf("drop queue %s: %v", queue, err)
	}
}

func TestProcessAt(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		deadline time.Time
		want     time.Time
	}{
		{"a whole second stays", base, base},
		{"a millisecond after rounds up", base.Add(time.Millisecond), base.Add(time.Second)},
		{"a millisecond before rounds up", base.Add(999 * time.Millisecond), base.Add(time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := processAt(tc.deadline)
			if !got.Equal(tc.want) {
				t.Fatalf("processAt(%s) = %s, want %s", tc.deadline, got, tc.want)
			}
			if got.Before(tc.deadline) {
				t.Fatalf("processAt(%s) = %s is before the deadline", tc.deadline, got)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload string
		want    hourglass.DueItem
		ok      bool
	}{
		{"42:1767323045123", hourglass.DueItem{ID: 42, At: hourglass.FromUnixMilli(1767323045123)}, true},
		{"42", hourglass.DueItem{}, false},
		{"x:1", hourglass.DueItem{}, false},
		{"1:y", hourglass.DueItem{}, false},
	} {
		got, err := decode([]byte(tc.payload))
		if (err == nil) != tc.ok {
			t.Errorf("decode(%q) error = %v, want ok=%v", tc.payload, err, tc.ok)
			continue
		}
		if tc.ok && (got.ID != tc.want.ID || !got.At.Equal(tc.want.At)) {
			t.Errorf("decode(%q) = %+v, want %+v", tc.payload, got, tc.want)
		}
	}
}
