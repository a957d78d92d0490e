package benchmark

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/wheel"
)

// fakeTimers is a TimerTarget that fires every timer when it is listed:
// the n-th armed one (from 0) at fire_at + late(n), or never when
// late(n) < -time.Hour. It also holds timers of other runs, which a run
// must neither count nor miss its own among.
type fakeTimers struct {
	late func(n int) time.Duration

	mu     sync.Mutex
	timers map[string]hourglass.Timer
	order  map[string]int
}

func newFakeTimers(late func(n int) time.Duration) *fakeTimers {
	f := &fakeTimers{late: late, timers: map[string]hourglass.Timer{}, order: map[string]int{}}
	for _, k := range []string{"bench-", "bench-0-000000001", "bench-zzz", "other"} {
		f.timers[k] = hourglass.Timer{Key: k, Status: hourglass.TimerScheduled}
	}
	return f
}

func (f *fakeTimers) ArmTimer(_ context.Context, key string, delay time.Duration) (hourglass.Timer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.order)
	t := hourglass.Timer{ID: hourglass.TimerIDBase + int64(n), Key: key, Status: hourglass.TimerScheduled,
		FireAt: time.Now().Add(delay).Truncate(time.Millisecond)}
	f.timers[key], f.order[key] = t, n
	return t, nil
}

func (f *fakeTimers) Timers(_ context.Context, after string, limit int) ([]hourglass.Timer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.timers {
		if k > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []hourglass.Timer
	for _, k := range keys[:min(limit, len(keys))] {
		t := f.timers[k]
		if n, ok := f.order[k]; ok && t.Status == hourglass.TimerScheduled {
			if late := f.late(n); late >= -time.Hour {
				t.Status, t.FiredAt = hourglass.TimerFired, t.FireAt.Add(late)
				f.timers[k] = t
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// TestDriveTimers runs the timers workload on fake targets and checks the
// figures and the invariant: each timer fired once, none early, none lost.
func TestDriveTimers(t *testing.T) {
	t.Parallel()
	const armed = 1500 // more than one page of GET /v1/timers
	tests := []struct {
		name      string
		late      func(n int) time.Duration
		fires     func(id int64) int // nil: not known (over HTTP)
		wantFired int
		wantLost  int
		wantDup   int
		wantP50   float64
		wantP90   float64
		wantMax   float64
		wantOK    bool
		wantViol  string
	}{
		{name: "all on time", late: func(n int) time.Duration { return time.Duration(n%10) * time.Millisecond },
			wantFired: armed, wantP50: 4, wantP90: 8, wantMax: 9, wantOK: true},
		{name: "fired once each, as the engine reports", late: func(int) time.Duration { return 0 },
			fires: func(int64) int { return 1 }, wantFired: armed, wantOK: true},
		{name: "one early", late: func(n int) time.Duration { return -time.Duration(b2i(n == 7)) * 7 * time.Millisecond },
			wantFired: armed, wantViol: "fired 7ms early"},
		{name: "one never fired", late: func(n int) time.Duration {
			if n == 3 {
				return -2 * time.Hour
			}
			return time.Millisecond
		}, wantFired: armed - 1, wantLost: 1, wantP50: 1, wantP90: 1, wantMax: 1, wantViol: "is still scheduled"},
		{name: "one later than the grace", late: func(n int) time.Duration {
			if n == 3 {
				return time.Second
			}
			return 0
		}, wantFired: armed, wantLost: 1, wantMax: 1000, wantOK: true},
		{name: "one fired twice", late: func(int) time.Duration { return 0 },
			fires:     func(id int64) int { return 1 + b2i(id == hourglass.TimerIDBase+5) },
			wantFired: armed, wantDup: 1, wantViol: "fired 2 times"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeTimers(tt.late)
			w := Workload{Rate: 15000, Duration: 100 * time.Millisecond, Timeouts: Timeouts{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}, Grace: 100 * time.Millisecond, Seed: 1}
			res, err := DriveTimers(t.Context(), "fake", f, w, nil, tt.fires, nil)
			if err != nil {
				t.Fatalf("DriveTimers: %v", err)
			}
			if res.Armed != armed || res.Fired != tt.wantFired {
				t.Errorf("armed %d, fired %d; want %d, %d", res.Armed, res.Fired, armed, tt.wantFired)
			}
			if res.Lost != tt.wantLost || res.DuplicateFires != tt.wantDup {
				t.Errorf("lost %d, duplicates %d; want %d, %d", res.Lost, res.DuplicateFires, tt.wantLost, tt.wantDup)
			}
			if l := res.Lateness; l.P50 != tt.wantP50 || l.P90 != tt.wantP90 || l.Max != tt.wantMax {
				t.Errorf("lateness p50 %v p90 %v max %v; want %v, %v, %v", l.P50, l.P90, l.Max, tt.wantP50, tt.wantP90, tt.wantMax)
			}
			if res.ArmThroughput < 1000 || res.Arm.N != armed {
				t.Errorf("arm throughput %.0f/s over %d arms; want about 15,000/s over %d", res.ArmThroughput, res.Arm.N, armed)
			}
			if res.InvariantOK != tt.wantOK || !tt.wantOK && !strings.Contains(strings.Join(res.Violations, "\n"), tt.wantViol) {
				t.Errorf("invariant ok = %v, violations %q; want ok = %v with %q", res.InvariantOK, res.Violations, tt.wantOK, tt.wantViol)
			}
			var out strings.Builder
			(&Report{Timers: []TimerResult{res}}).WriteTimerTable(&out)
			if !strings.Contains(out.String(), "fired/s") {
				t.Errorf("timer table lacks its header:\n%s", out.String())
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestParseKinds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"orders", []string{KindOrders}},
		{"timers", []string{KindTimers}},
		{"orders,timers", []string{KindOrders, KindTimers}},
		{"timers, orders", []string{KindTimers, KindOrders}},
		{"", nil},
		{"jobs", nil},
		{"timers,timers", nil},
	} {
		got, err := ParseKinds(tt.in)
		if (err == nil) != (tt.want != nil) || !slices.Equal(got, tt.want) {
			t.Errorf("ParseKinds(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// TestRunTimersInProcess runs a short timers workload on the wheel and a
// fresh SQLite database, through the real store and engine: every timer
// fires once and none early. Lateness is not checked: under -race on a
// loaded machine it is the machine's (the grace is long so that the sweeper
// does not take over).
func TestRunTimersInProcess(t *testing.T) {
	t.Parallel()
	sys := System{Name: "wheel", Feed: hourglass.FeedWindow, Open: func(context.Context, hourglass.Store) (hourglass.Scheduler, error) {
		return wheel.New(wheel.Config{}), nil
	}}
	w := Workload{Rate: 400, Duration: 500 * time.Millisecond, Timeouts: Timeouts{Min: 300 * time.Millisecond, Max: 300 * time.Millisecond}, Grace: 5 * time.Second, Seed: 1}
	res, err := RunTimersInProcess(t.Context(), sys, "", w, nil)
	if err != nil {
		t.Fatalf("RunTimersInProcess: %v", err)
	}
	if res.Armed != 200 || res.Fired != 200 || res.DuplicateFires != 0 || res.Lateness.Early != 0 || !res.InvariantOK {
		t.Errorf("armed %d, fired %d, duplicates %d, early %d, invariant ok %v (%q); want 200 fired once, none early",
			res.Armed, res.Fired, res.DuplicateFires, res.Lateness.Early, res.InvariantOK, res.Violations)
	}
	t.Logf("fire lateness %+v, %d swept", res.Lateness, res.Recovered)
}
