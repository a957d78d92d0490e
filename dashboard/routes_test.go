package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/dashboard"
)

// TestRoutes checks the page and its data over real HTTP: the page and its
// files are public, served from the binary with a strict CSP; the data is
// behind the token; the JSON 404 catch-all still answers other paths.
func TestRoutes(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, tc := range []struct {
		method, path string
		token        bool
		wantStatus   int
		wantType     string // Content-Type prefix
		wantBody     string // substring
	}{
		{"GET", "/", false, 200, "text/html", `<script src="/dashboard/app.js" defer></script>`},
		{"GET", "/?token=abc", false, 200, "text/html", "<title>hourglass</title>"},
		{"HEAD", "/", false, 200, "text/html", ""},
		{"GET", "/dashboard/app.js", false, 200, "text/javascript", "/v1/dashboard"},
		{"GET", "/dashboard/style.css", false, 200, "text/css", ":root"},
		{"GET", "/dashboard/index.html", false, 404, "application/json", `"not_found"`},
		{"GET", "/dashboard/nope.js", false, 404, "application/json", `"not_found"`},
		{"GET", "/index.html", false, 404, "application/json", `"not_found"`},
		{"POST", "/", false, 405, "application/json", `"method_not_allowed"`},
		{"GET", "/v1/dashboard", false, 401, "application/json", `"unauthorized"`},
		{"GET", "/v1/dashboard", true, 200, "application/json", `"orders"`},
		{"GET", "/v1/dashboard?x=1", true, 400, "application/json", "takes no query parameters"},
		{"POST", "/v1/dashboard", true, 405, "application/json", `"method_not_allowed"`},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			status, h, body := s.call(t, tc.method, tc.path, tc.token)
			if status != tc.wantStatus || !strings.HasPrefix(h.Get("Content-Type"), tc.wantType) || !strings.Contains(string(body), tc.wantBody) {
				t.Errorf("%s %s: %d %q %.200s; want %d %s containing %q", tc.method, tc.path, status, h.Get("Content-Type"), body, tc.wantStatus, tc.wantType, tc.wantBody)
			}
			if tc.method == "HEAD" && len(body) != 0 {
				t.Errorf("HEAD answered a body of %d bytes", len(body))
			}
			if status == 200 && !strings.HasPrefix(tc.path, "/v1/") {
				if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
					t.Errorf("Content-Security-Policy %q, want default-src 'self'", csp)
				}
				if h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("headers %v lack Referrer-Policy no-referrer / nosniff", h)
				}
			}
			if status == 405 && tc.path == "/" && h.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q, want GET, HEAD", h.Get("Allow"))
			}
		})
	}
}

// TestSnapshotMatchesAPI checks GET /v1/dashboard against the API and what
// was done: orders per state as GET /v1/orders?status= lists them, the
// closes due, creates and closes per second, the lateness histogram, every
// alert rule, the dead-letter count, timers per status as GET
// /v1/timers?status= lists them with their fires and fire lateness, the
// webhook delivery lag and the deferred fan-outs; and the documented shape
// exactly.
func TestSnapshotMatchesAPI(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	want := s.orderMix(t)
	wantTimers := s.timerMix(t)
	// Nothing asked for a snapshot before, so this one is taken now, not
	// cached (checked below: its now is not before the mix was done).
	mixed := time.Now().Truncate(time.Millisecond)
	status, _, raw := s.call(t, "GET", "/v1/dashboard", true)
	if status != 200 {
		t.Fatalf("GET /v1/dashboard: %d %s", status, raw)
	}
	var fields map[string]json.RawMessage
	mustJSON(t, raw, &fields)
	if got, wantKeys := slices.Sorted(maps.Keys(fields)), []string{"alerts", "dead_letters", "delivery_lag", "due", "fanout_pending", "lateness", "now", "orders", "overdue", "rates", "reminders", "sources", "timer_requests", "timers"}; !slices.Equal(got, wantKeys) {
		t.Errorf("top-level keys %v, want %v", got, wantKeys)
	}
	var snap dashboard.Snapshot
	mustJSON(t, raw, &snap)
	if now, err := time.Parse(time.RFC3339Nano, snap.Now); err != nil || now.Before(mixed) {
		t.Fatalf("snapshot now %q (%v): want a snapshot taken after the mix (%s), not a cached one", snap.Now, err, mixed.UTC().Format(time.RFC3339Nano))
	}
	if snap.TimerRequests == nil || snap.TimerRequests.Applied != 0 || snap.TimerRequests.RejectedKept != 0 || snap.TimerRequests.WindowSeconds != 60 {
		t.Errorf("timer_requests %+v; want none applied or rejected over a 60 s window", snap.TimerRequests)
	}

	for _, st := range hourglass.States() {
		if got, api := snap.Orders[string(st)], s.countByAPI(t, string(st)); got != want[string(st)] || got != api {
			t.Errorf("orders[%s] = %d; made %d, GET /v1/orders?status= lists %d", st, got, want[string(st)], api)
		}
	}
	if snap.Overdue != 0 {
		t.Errorf("overdue = %d, want 0", snap.Overdue)
	}
	if snap.Due.BucketSeconds != 10 || len(snap.Due.Counts) != 30 || snap.Due.From != snap.Now {
		t.Errorf("due = %+v, want 30 buckets of 10s from now", snap.Due)
	}
	if i := slices.IndexFunc(snap.Due.Counts, func(n int64) bool { return n > 0 }); i != 11 || snap.Due.Counts[11] != 2 || sum(snap.Due.Counts) != 2 {
		t.Errorf("due counts %v, want the 2 orders due in 2 minutes in bucket 11 (110s, 120s]", snap.Due.Counts)
	}
	r := snap.Rates
	if r.StepSeconds != 1 || len(r.Closes) != 300 || len(r.Creates) != 300 || len(r.CloseFailures) != 300 {
		t.Errorf("rates: step %d, %d/%d/%d points, want 1s and 300 each", r.StepSeconds, len(r.Closes), len(r.Creates), len(r.CloseFailures))
	}
	if sum(r.Creates) != 10 || sum(r.Closes) != 2 || sum(r.CloseFailures) != 0 {
		t.Errorf("rates sum to %d creates, %d closes, %d failures; want 10, 2, 0", sum(r.Creates), sum(r.Closes), sum(r.CloseFailures))
	}
	l := snap.Lateness
	if !slices.Equal(l.BoundsSeconds, alert.LatenessBounds[:]) || len(l.Counts) != len(l.BoundsSeconds)+1 || sum(l.Counts) != 2 || l.WindowSeconds != 300 {
		t.Errorf("lateness %+v, want the recorder's bounds and the 2 closes over 300s", l)
	}
	var rules []string
	for _, a := range snap.Alerts {
		rules = append(rules, a.Rule)
		if a.State != "ok" || a.Since != nil || a.Error != nil || a.Summary == "" {
			t.Errorf("alert %+v, want ok with a summary", a)
		}
	}
	if want := []string{alert.RuleCloseBacklog, alert.RuleCloseLatenessP99, alert.RuleCloseFailureRate, alert.RuleStockReleaseFailures, alert.RuleDeadLetters}; !slices.Equal(rules, want) {
		t.Errorf("alert rules %v, want %v", rules, want)
	}
	if snap.DeadLetters == nil || *snap.DeadLetters != 0 {
		t.Errorf("dead_letters = %v, want 0", snap.DeadLetters)
	}
	// No webhook subscribed: no delivery over the last minute, nothing
	// deferred.
	if d := snap.DeliveryLag; d == nil || d.WindowSeconds != 60 || d.Deliveries != 0 || d.P50Seconds != 0 || d.P99Seconds != 0 {
		t.Errorf("delivery_lag = %+v, want no deliveries over 60s", d)
	}
	if snap.FanoutPending == nil || *snap.FanoutPending != 0 {
		t.Errorf("fanout_pending = %v, want 0", snap.FanoutPending)
	}

	tm := snap.Timers
	if tm == nil {
		t.Fatalf("timers = null, want them (the server keeps timers)")
	}
	if len(tm.Counts) != 3 {
		t.Errorf("timer counts %v, want the 3 statuses", tm.Counts)
	}
	for _, st := range []string{"scheduled", "fired", "cancelled"} {
		if got, api := tm.Counts[st], s.countTimersByAPI(t, st); got != wantTimers[st] || got != api {
			t.Errorf("timers[%s] = %d; made %d, GET /v1/timers?status= lists %d", st, got, wantTimers[st], api)
		}
	}
	if len(tm.Fires) != 300 || sum(tm.Fires) != 2 {
		t.Errorf("timer fires: %d points summing to %d, want 300 summing to 2", len(tm.Fires), sum(tm.Fires))
	}
	tl := tm.Lateness
	if !slices.Equal(tl.BoundsSeconds, alert.LatenessBounds[:]) || len(tl.Counts) != len(tl.BoundsSeconds)+1 || sum(tl.Counts) != 2 || tl.WindowSeconds != 300 {
		t.Errorf("timer lateness %+v, want the recorder's bounds and the 2 fires over 300s", tl)
	}
	if sum(l.Counts) != 2 {
		t.Errorf("close lateness counts %d closes, want 2: the fires must not be counted as closes", sum(l.Counts))
	}
}

func sum(xs []int64) (t int64) {
	for _, x := range xs {
		t += x
	}
	return t
}

// fakeStats counts the queries a snapshot makes.
type fakeStats struct {
	calls atomic.Int64
	err   error
}

func (f *fakeStats) OrderCounts(context.Context, time.Time) (map[hourglass.State]int64, error) {
	f.calls.Add(1)
	return map[hourglass.State]int64{hourglass.StatePaid: 2}, f.err
}

func (f *fakeStats) CountPendingDue(context.Context, time.Time, int) (int, error) { return 0, nil }

func (f *fakeStats) PendingDeadlineBuckets(_ context.Context, _ time.Time, _ time.Duration, n int) ([]int64, error) {
	return make([]int64, n), nil
}

// TestSnapshotCacheAndErrors: snapshots within CacheFor share one set of
// queries; a failed query is an error naming it, and is not cached; without
// alerts or webhooks the fields are empty and null.
func TestSnapshotCacheAndErrors(t *testing.T) {
	t.Parallel()
	stats := &fakeStats{}
	src, err := dashboard.New(dashboard.Config{Stats: stats, Activity: alert.NewRecorder(nil)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()
	first, err := src.Snapshot(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if first.DeadLetters != nil || first.Timers != nil || len(first.Alerts) != 0 || first.Orders["paid"] != 2 || first.Orders["closed"] != 0 || len(first.Orders) != len(hourglass.States()) {
		t.Errorf("snapshot %+v, want null dead_letters and timers, no alerts, every state", first)
	}
	again, _ := src.Snapshot(ctx, now.Add(dashboard.CacheForDefault-time.Millisecond))
	if again != first || stats.calls.Load() != 1 {
		t.Errorf("within CacheFor: a new snapshot (%d queries), want the cached one", stats.calls.Load())
	}
	if next, _ := src.Snapshot(ctx, now.Add(dashboard.CacheForDefault)); next == first || stats.calls.Load() != 2 {
		t.Errorf("after CacheFor: the cached snapshot, want a new one")
	}
	stats.err = errors.New("disk I/O error")
	if _, err := src.Snapshot(ctx, now.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "dashboard: order counts: disk I/O error") {
		t.Errorf("failed query: %v, want it wrapped with the query's name", err)
	}
	if _, err := dashboard.New(dashboard.Config{Stats: stats}); err == nil {
		t.Errorf("New without Activity: no error")
	}
	withTimers, err := dashboard.New(dashboard.Config{Stats: &fakeStats{}, Activity: alert.NewRecorder(nil), Timers: fakeTimerCounts{err: errors.New("no such table: timers")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := withTimers.Snapshot(ctx, now); err == nil || !strings.Contains(err.Error(), "dashboard: timer counts: no such table: timers") {
		t.Errorf("failed timer counts: %v, want it wrapped with the query's name", err)
	}
}

// fakeTimerCounts answers TimerCounts.
type fakeTimerCounts struct{ err error }

func (f fakeTimerCounts) TimerCounts(context.Context) (map[hourglass.TimerStatus]int64, error) {
	return map[hourglass.TimerStatus]int64{hourglass.TimerFired: 1}, f.err
}
