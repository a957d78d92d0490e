package timing_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/timing"
)

func setup(t *testing.T) (context.Context, *hourglasstest.Clock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx, hourglasstest.NewClock(hourglasstest.Epoch)
}

func TestSleep(t *testing.T) {
	t.Parallel()
	ctx, clock := setup(t)
	done := make(chan error, 1)
	go func() { done <- timing.Sleep(ctx, clock, time.Minute) }()
	if err := clock.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute - time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before its time", err)
	default:
	}
	clock.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- timing.Sleep(cctx, clock, time.Minute) }()
	if err := clock.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep after cancel = %v, want context.Canceled", err)
	}
	if err := timing.Sleep(cctx, clock, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context = %v, want context.Canceled", err)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := timing.Backoff{Min: 50 * time.Millisecond, Max: 300 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	b.Reset()
	if d := b.Next(); d != b.Min {
		t.Fatalf("after Reset: %s, want Min", d)
	}
}

// TestSupervisor restarts a failing run with backoff, on the fake clock,
// starts the backoff over after a long run, and stops at the first success.
func TestSupervisor(t *testing.T) {
	t.Parallel()
	ctx, clock := setup(t)
	type failure struct {
		err  string
		wait time.Duration
	}
	failures := make(chan failure, 10)
	runs := 0
	s := timing.Supervisor{
		Clock:      clock,
		Backoff:    timing.Backoff{Min: time.Second, Max: 4 * time.Second},
		ResetAfter: time.Minute,
		Failed:     func(err error, wait time.Duration) { failures <- failure{err.Error(), wait} },
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(context.Context) error {
			runs++
			switch runs {
			case 4:
				clock.Advance(time.Minute) // a long run: the backoff starts over
				return errors.New("fail after a long run")
			case 5:
				return nil
			}
			return errors.New("fail")
		})
	}()
	want := []failure{{"fail", time.Second}, {"fail", 2 * time.Second}, {"fail", 4 * time.Second}, {"fail after a long run", time.Second}}
	for _, w := range want {
		got := <-failures
		if got != w {
			t.Fatalf("failure %+v, want %+v", got, w)
		}
		if err := clock.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(got.wait)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after a successful run, want nil", err)
	}
	if runs != 5 {
		t.Fatalf("%d runs, want 5", runs)
	}
}

func TestSupervisorStopsWithContext(t *testing.T) {
	t.Parallel()
	ctx, clock := setup(t)
	cctx, cancel := context.WithCancel(ctx)
	s := timing.Supervisor{Clock: clock, Backoff: timing.Backoff{Min: time.Second, Max: time.Second},
		Failed: func(error, time.Duration) { cancel() }}
	err := s.Run(cctx, func(context.Context) error { return errors.New("fail") })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	// An error caused by the end of ctx is not a failure.
	s.Failed = func(error, time.Duration) { t.Error("Failed called for an error caused by ctx's end") }
	if err := s.Run(cctx, func(ctx context.Context) error { return ctx.Err() }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}
