package gotimer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/gotimer"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestConformance runs the scheduler suite. gotimer has no service to find:
// it is in memory, so the durable parts of the suite are skipped (the engine
// reloads the window after a crash; see TestRestartLosesNothing).
func TestConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, _ string) hourglass.Scheduler {
			s := gotimer.New(gotimer.Config{})
			t.Cleanup(func() { s.Close() })
			return s
		},
		MaxLateness: 250 * time.Millisecond, // under -race, beside the store suites on 2 cores; lateness is measured by hourglass bench
	})
}

// deliveries collects delivered timers and signals each delivery.
type deliveries struct {
	mu  sync.Mutex
	got []hourglass.DueItem
	ch  chan struct{}
}

func newDeliveries() *deliveries { return &deliveries{ch: make(chan struct{}, 1000)} }

func (d *deliveries) deliver(_ context.Context, due []hourglass.DueItem) error {
	d.mu.Lock()
	d.got = append(d.got, due...)
	d.mu.Unlock()
	d.ch <- struct{}{}
	return nil
}

func (d *deliveries) timers() []hourglass.DueItem {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]hourglass.DueItem(nil), d.got...)
}

// waitFor waits until n timers were delivered.
func (d *deliveries) waitFor(t *testing.T, n int) []hourglass.DueItem {
	t.Helper()
	limit := time.After(5 * time.Second)
	for {
		if got := d.timers(); len(got) >= n {
			return got
		}
		select {
		case <-d.ch:
		case <-limit:
			t.Fatalf("%d timers delivered, want %d", len(d.timers()), n)
		}
	}
}

func run(t *testing.T, s *gotimer.Scheduler, deliver hourglass.Deliver) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestNoDeliveryBeforeRun checks that a timer firing before Run starts
// waits for Run instead of being delivered or lost.
func TestNoDeliveryBeforeRun(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s := gotimer.New(gotimer.Config{Clock: clock})
	defer s.Close()
	d := newDeliveries()
	tm := hourglass.DueItem{ID: 7, At: clock.Now().Add(10 * time.Millisecond)}
	if err := s.Schedule(context.Background(), []hourglass.DueItem{tm}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(100 * time.Millisecond) // the timer fires (in Advance, on the fake clock)
	if got := d.timers(); len(got) != 0 {
		t.Fatalf("delivered %v before Run", got)
	}
	if n := s.Pending(); n != 0 {
		t.Errorf("Pending() = %d after the timer fired, want 0", n)
	}
	run(t, s, d.deliver)
	if got := d.waitFor(t, 1); got[0] != tm {
		t.Errorf("delivered %v, want %v", got[0], tm)
	}
}

func TestScheduleAndCancel(t *testing.T) {
	t.Parallel()
	type step struct {
		cancel   bool
		id       int64
		deadline time.Duration // from the test's start
	}
	tests := []struct {
		name    string
		steps   []step
		pending int                     // timers held after the steps
		want    map[int64]time.Duration // delivered id → deadline
	}{
		{
			name:    "one timer",
			steps:   []step{{false, 1, 50 * time.Millisecond}},
			pending: 1,
			want:    map[int64]time.Duration{1: 50 * time.Millisecond},
		},
		{
			name:    "re-schedule replaces the deadline",
			steps:   []step{{false, 1, 50 * time.Millisecond}, {false, 1, 150 * time.Millisecond}},
			pending: 1,
			want:    map[int64]time.Duration{1: 150 * time.Millisecond},
		},
		{
			name:    "re-schedule earlier",
			steps:   []step{{false, 1, time.Hour}, {false, 1, 50 * time.Millisecond}},
			pending: 1,
			want:    map[int64]time.Duration{1: 50 * time.Millisecond},
		},
		{
			name:    "cancel one of two",
			steps:   []step{{false, 1, 50 * time.Millisecond}, {false, 2, 60 * time.Millisecond}, {true, 1, 0}},
			pending: 1,
			want:    map[int64]time.Duration{2: 60 * time.Millisecond},
		},
		{
			name:    "cancel an unknown id",
			steps:   []step{{false, 1, 50 * time.Millisecond}, {true, 99, 0}, {true, 99, 0}},
			pending: 1,
			want:    map[int64]time.Duration{1: 50 * time.Millisecond},
		},
		{
			name:    "schedule after cancel",
			steps:   []step{{false, 1, 50 * time.Millisecond}, {true, 1, 0}, {false, 1, 80 * time.Millisecond}},
			pending: 1,
			want:    map[int64]time.Duration{1: 80 * time.Millisecond},
		},
		{
			name:  "past deadline fires at once",
			steps: []step{{false, 1, -time.Second}},
			want:  map[int64]time.Duration{1: -time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := hourglasstest.NewClock(hourglasstest.Epoch)
			s := gotimer.New(gotimer.Config{Clock: clock})
			defer s.Close()
			base := clock.Now().Add(100 * time.Millisecond)
			ctx := context.Background()
			for _, st := range tt.steps {
				if st.cancel {
					if err := s.Cancel(ctx, []int64{st.id}); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := s.Schedule(ctx, []hourglass.DueItem{{ID: st.id, At: base.Add(st.deadline)}}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.pending > 0 { // a past deadline may already have fired
				if n := s.Pending(); n != tt.pending {
					t.Errorf("Pending() = %d, want %d", n, tt.pending)
				}
			}
			// Every deadline passes (but the replaced hour): each timer due
			// fires, in order, before Advance returns, and waits in the
			// dispatcher for Run, which delivers them together. A replaced
			// or cancelled timer would have fired too.
			clock.Advance(500 * time.Millisecond)
			d := newDeliveries()
			run(t, s, d.deliver)
			d.waitFor(t, len(tt.want))
			got := d.timers()
			if len(got) != len(tt.want) {
				t.Fatalf("delivered %v, want %d timers", got, len(tt.want))
			}
			for _, tm := range got {
				want, ok := tt.want[tm.ID]
				if !ok || !tm.At.Equal(base.Add(want)) {
					t.Errorf("delivered order %d due %s, want %v", tm.ID, tm.At.Sub(base), want)
				}
			}
			if n := s.Pending(); n != 0 {
				t.Errorf("Pending() = %d after every timer fired", n)
			}
		})
	}
}

// TestCloseStopsTimers checks that no timer fires after Close and that
// Schedule then fails.
func TestCloseStopsTimers(t *testing.T) {
	t.Parallel()
	s := gotimer.New(gotimer.Config{})
	d := newDeliveries()
	stop := run(t, s, d.deliver)
	timers := []hourglass.DueItem{{ID: 1, At: time.Now().Add(50 * time.Millisecond)}}
	if err := s.Schedule(context.Background(), timers); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n := s.Pending(); n != 0 {
		t.Errorf("Pending() = %d after Close", n)
	}
	if err := s.Schedule(context.Background(), timers); !errors.Is(err, gotimer.ErrClosed) {
		t.Errorf("Schedule after Close = %v, want ErrClosed", err)
	}
}
