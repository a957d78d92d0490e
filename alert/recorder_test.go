package alert_test

import (
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/hourglasstest"
)

func closed(deadline time.Time, late time.Duration) hourglass.ClosedOrder {
	return hourglass.ClosedOrder{Deadline: deadline, ClosedAt: deadline.Add(late)}
}

func TestRecorderActivity(t *testing.T) {
	t.Parallel()
	start := hourglasstest.Epoch.Truncate(time.Second)
	clock := hourglasstest.NewClock(start)
	r := alert.NewRecorder(clock)

	// Second 0: two closes (1ms and 4s late), one stale, a failed close of 3,
	// one create (and requests that are not creates).
	r.Closed(closed(start, time.Millisecond), false)
	r.Closed(closed(start, 4*time.Second), true)
	r.Stale(1)
	r.CloseFailed(3, nil)
	r.ObserveRequest(alert.CreateRoute, http.MethodPost, http.StatusCreated, 0)
	r.ObserveRequest(alert.CreateRoute, http.MethodPost, http.StatusOK, 0) // idempotent repeat
	r.ObserveRequest(alert.CreateRoute, http.MethodGet, http.StatusOK, 0)
	r.ObserveRequest("/v1/orders/{id}/pay", http.MethodPost, http.StatusOK, 0)
	// Two timers fired (2ms and 20ms late): counted apart from the closes.
	r.Fired(hourglass.FiredTimer{FireAt: start, FiredAt: start.Add(2 * time.Millisecond)}, false)
	r.Fired(hourglass.FiredTimer{FireAt: start, FiredAt: start.Add(20 * time.Millisecond)}, true)
	// Second 2: one close exactly on a bound (3s is in the "<= 3" bucket).
	clock.Advance(2 * time.Second)
	r.Closed(closed(start, 3*time.Second), false)
	r.ObserveRequest(alert.CreateRoute, http.MethodPost, http.StatusCreated, 0)

	a := r.Activity(clock.Now().Add(500*time.Millisecond), 3*time.Second)
	if !a.From.Equal(start) {
		t.Errorf("From = %v, want %v", a.From, start)
	}
	for _, c := range []struct {
		name      string
		got, want []int64
	}{
		{"Closed", a.Closed, []int64{2, 0, 1}},
		{"Failed", a.Failed, []int64{3, 0, 0}},
		{"Stale", a.Stale, []int64{1, 0, 0}},
		{"Created", a.Created, []int64{1, 0, 1}},
		{"Fired", a.Fired, []int64{2, 0, 0}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	wantLate := make([]int64, len(alert.LatenessBounds)+1)
	wantLate[slices.Index(alert.LatenessBounds[:], .001)]++
	wantLate[slices.Index(alert.LatenessBounds[:], 3)]++
	wantLate[slices.Index(alert.LatenessBounds[:], 5)]++
	if !slices.Equal(a.Lateness, wantLate) {
		t.Errorf("Lateness = %v, want %v", a.Lateness, wantLate)
	}
	wantFireLate := make([]int64, len(alert.LatenessBounds)+1)
	wantFireLate[slices.Index(alert.LatenessBounds[:], .002)]++
	wantFireLate[slices.Index(alert.LatenessBounds[:], .02)]++
	if !slices.Equal(a.FireLateness, wantFireLate) {
		t.Errorf("FireLateness = %v, want %v", a.FireLateness, wantFireLate)
	}

	// A 1s window holds only the last second.
	if a := r.Activity(clock.Now(), time.Second); !slices.Equal(a.Closed, []int64{1}) {
		t.Errorf("last second: Closed = %v, want [1]", a.Closed)
	}
	// After the span has gone by, everything has aged out even though the
	// ring slots were never overwritten.
	clock.Advance(alert.RecorderSpan)
	a = r.Activity(clock.Now(), alert.RecorderSpan)
	if n := len(a.Closed); n != int(alert.RecorderSpan/time.Second) {
		t.Errorf("full span has %d seconds, want %d", n, alert.RecorderSpan/time.Second)
	}
	for i, v := range a.Closed {
		if v != 0 || a.Failed[i] != 0 || a.Created[i] != 0 {
			t.Fatalf("second %d after the span: closed %d failed %d created %d, want zeros", i, v, a.Failed[i], a.Created[i])
		}
	}
	// A slot reused for a newer second starts from zero.
	r.CloseFailed(1, nil)
	if a := r.Activity(clock.Now(), time.Second); !slices.Equal(a.Failed, []int64{1}) {
		t.Errorf("reused slot: Failed = %v, want [1]", a.Failed)
	}
	// Spans are clamped to 1s..RecorderSpan.
	if n := len(r.Activity(clock.Now(), 0).Closed); n != 1 {
		t.Errorf("span 0 gives %d seconds, want 1", n)
	}
	if n := len(r.Activity(clock.Now(), time.Hour).Closed); n != int(alert.RecorderSpan/time.Second) {
		t.Errorf("span 1h gives %d seconds, want %d", n, alert.RecorderSpan/time.Second)
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	idx := func(bound float64) int { return slices.Index(alert.LatenessBounds[:], bound) }
	hist := func(pairs ...float64) []int64 { // bound, count, bound, count…; bound -1 is +Inf
		h := make([]int64, len(alert.LatenessBounds)+1)
		for i := 0; i < len(pairs); i += 2 {
			j := len(alert.LatenessBounds)
			if pairs[i] >= 0 {
				j = idx(pairs[i])
			}
			h[j] += int64(pairs[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name string
		h    []int64
		want float64
	}{
		{"empty", hist(), 0},
		{"all in the first bucket", hist(.0005, 100), .0005 * 0.99},
		{"all at most 3s stays under 3", hist(3, 100), 2.5 + 0.5*0.99},
		{"1% over 3s does not reach past 3", hist(.01, 99, 5, 1), .005 + .005*1},
		{"2% over 3s", hist(.01, 98, 5, 2), 3 + 2*0.5},
		{"rank in +Inf gives the last bound", hist(.01, 90, -1, 10), 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := alert.Quantile(0.99, tc.h); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Quantile(0.99) = %g, want %g", got, tc.want)
			}
		})
	}
}
