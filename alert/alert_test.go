package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/hourglasstest"
)

// receiver is a real HTTP alert webhook on 127.0.0.1. It answers 500 to the
// first failFirst POSTs, then 200, and hands every accepted notification to
// got.
type receiver struct {
	URL       string
	got       chan alert.Notification
	attempts  atomic.Int64
	failFirst int64
}

func newReceiver(t *testing.T, failFirst int64) *receiver {
	t.Helper()
	r := &receiver{got: make(chan alert.Notification, 100), failFirst: failFirst}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := r.attempts.Add(1)
		if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("alert webhook: %s with Content-Type %q, want POST application/json", req.Method, req.Header.Get("Content-Type"))
		}
		if n <= r.failFirst {
			http.Error(w, "receiver down", http.StatusInternalServerError)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("alert webhook: read body: %v", err)
			return
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil {
			t.Errorf("alert webhook: body %s: %v", body, err)
		}
		for _, f := range []string{"rule", "state", "value", "threshold", "summary", "started_at", "resolved_at"} {
			if _, ok := fields[f]; !ok {
				t.Errorf("alert webhook: body %s lacks %q", body, f)
			}
		}
		var note alert.Notification
		if err := json.Unmarshal(body, &note); err != nil {
			t.Errorf("alert webhook: body %s: %v", body, err)
		}
		r.got <- note
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// next waits for the next accepted notification.
func (r *receiver) next(t *testing.T, timeout time.Duration) alert.Notification {
	t.Helper()
	select {
	case n := <-r.got:
		return n
	case <-time.After(timeout):
		t.Fatalf("alert webhook: no notification within %v", timeout)
		return alert.Notification{}
	}
}

// none checks no further notification was accepted.
func (r *receiver) none(t *testing.T) {
	t.Helper()
	select {
	case n := <-r.got:
		t.Errorf("alert webhook: unexpected notification %+v", n)
	default:
	}
}

// fakes: values the rules read, set by the test.
type fakeCounts struct {
	mu          sync.Mutex
	backlog     int
	deadLetters int
	skew        time.Duration
	err         error
}

func (f *fakeCounts) set(fn func(*fakeCounts)) { f.mu.Lock(); fn(f); f.mu.Unlock() }

func (f *fakeCounts) CountPendingDue(context.Context, time.Time, int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.backlog, f.err
}

func (f *fakeCounts) DBClockSkew() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.skew
}

// fixedSkew is an alert.ClockSkewSource that never changes.
type fixedSkew time.Duration

func (s fixedSkew) DBClockSkew() time.Duration { return time.Duration(s) }

func (f *fakeCounts) DeadLetterCount(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadLetters, nil
}

// observer records what the evaluator reports for metrics.
type observer struct {
	mu          sync.Mutex
	firing      map[string]bool
	backlog     int
	deadLetters int
	evaluations chan struct{}
}

func newObserver() *observer {
	return &observer{firing: map[string]bool{}, evaluations: make(chan struct{}, 1000)}
}

func (o *observer) AlertFiring(rule string, firing bool) {
	o.mu.Lock()
	o.firing[rule] = firing
	o.mu.Unlock()
}

// CloseBacklog is called once per evaluation: it signals one.
func (o *observer) CloseBacklog(n int) {
	o.mu.Lock()
	o.backlog = n
	o.mu.Unlock()
	select {
	case o.evaluations <- struct{}{}:
	default:
	}
}

func (o *observer) DeadLetters(n int) { o.mu.Lock(); o.deadLetters = n; o.mu.Unlock() }

func (o *observer) isFiring(rule string) (firing, known bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	firing, known = o.firing[rule]
	return firing, known
}

// TestRules drives every rule across its threshold with a fake clock and
// checks the state, the observer and the webhook: one firing, then one
// resolve, and nothing while the state does not change.
func TestRules(t *testing.T) {
	t.Parallel()
	start := hourglasstest.Epoch.Truncate(time.Second)
	type env struct {
		clock  *hourglasstest.Clock
		rec    *alert.Recorder
		counts *fakeCounts
	}
	for _, tc := range []struct {
		rule string
		fire func(e env) // make the rule fire (from an idle state)
		calm func(e env) // make it resolve
		// wantValue is the value reported when firing.
		wantValue, wantThreshold float64
	}{
		{
			rule:      alert.RuleCloseBacklog,
			fire:      func(e env) { e.counts.set(func(f *fakeCounts) { f.backlog = 6 }) },
			calm:      func(e env) { e.counts.set(func(f *fakeCounts) { f.backlog = 5 }) },
			wantValue: 6, wantThreshold: 5,
		},
		{
			rule: alert.RuleCloseLatenessP99,
			fire: func(e env) {
				// 97 on time and 3 closes 10 s late: p99 in the (5s, 10s] bucket.
				for i := range 100 {
					late := time.Millisecond
					if i < 3 {
						late = 10 * time.Second
					}
					e.rec.Closed(closed(e.clock.Now().Add(-late), late), false)
				}
			},
			calm:      func(e env) { e.clock.Advance(time.Minute) }, // the window moves past them
			wantValue: 5 + 5*(99.0-97)/3, wantThreshold: 2,
		},
		{
			rule: alert.RuleCloseFailureRate,
			fire: func(e env) {
				for range 47 {
					e.rec.Closed(closed(e.clock.Now(), 0), false)
				}
				e.rec.Stale(1)
				e.rec.CloseFailed(2, errors.New("disk I/O error")) // 2 of 50 attempts: 4%
			},
			calm:      func(e env) { e.clock.Advance(time.Minute) },
			wantValue: 0.04, wantThreshold: 0.03,
		},
		{
			rule: alert.RuleStockReleaseFailures,
			fire: func(e env) {
				// 4 in a 30s window: 8/min, but only 2% of 204 attempts.
				for range 200 {
					e.rec.Closed(closed(e.clock.Now(), 0), false)
				}
				e.rec.CloseFailed(4, errors.New("disk I/O error"))
			},
			calm:      func(e env) { e.clock.Advance(30 * time.Second) },
			wantValue: 8, wantThreshold: 7,
		},
		{
			rule:      alert.RuleDeadLetters,
			fire:      func(e env) { e.counts.set(func(f *fakeCounts) { f.deadLetters = 1 }) },
			calm:      func(e env) { e.counts.set(func(f *fakeCounts) { f.deadLetters = 0 }) },
			wantValue: 1, wantThreshold: 0,
		},
		{
			// Two database servers' clocks 2 s apart; at the threshold it
			// does not fire.
			rule:      alert.RuleDBClockSkew,
			fire:      func(e env) { e.counts.set(func(f *fakeCounts) { f.skew = 2 * time.Second }) },
			calm:      func(e env) { e.counts.set(func(f *fakeCounts) { f.skew = 250 * time.Millisecond }) },
			wantValue: 2, wantThreshold: 0.25,
		},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			e := env{clock: hourglasstest.NewClock(start), counts: &fakeCounts{}}
			e.rec = alert.NewRecorder(e.clock)
			recv := newReceiver(t, 0)
			obs := newObserver()
			ev, err := alert.New(alert.Config{
				Backlog:     e.counts,
				Activity:    e.rec,
				DeadLetters: e.counts,
				ClockSkew:   e.counts,
				Thresholds: alert.Thresholds{
					CloseBacklog:         5,
					CloseLatenessP99:     2 * time.Second,
					CloseFailureRate:     0.03,
					StockReleaseFailures: 7,
					DeadLetters:          0,
					DBClockSkew:          250 * time.Millisecond,
				},
				Window:   30 * time.Second,
				Interval: -1,
				Webhook:  alert.WebhookConfig{URL: recv.URL, Backoff: time.Millisecond},
				Observer: obs,
				Clock:    e.clock,
				Logger:   slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range ev.Rules() {
				if firing, known := obs.isFiring(r); !known || firing {
					t.Errorf("after New: %s firing=%v known=%v, want a 0 gauge", r, firing, known)
				}
			}
			// Interval -1: Run only delivers notifications; the test calls
			// Evaluate at the fake clock's times.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- ev.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			status := func() alert.Status {
				for _, s := range ev.Status() {
					if s.Rule == tc.rule {
						return s
					}
				}
				t.Fatalf("no status for rule %s", tc.rule)
				return alert.Status{}
			}
			ev.Evaluate(ctx)
			if s := status(); s.Firing {
				t.Fatalf("idle: %+v firing", s)
			}
			tc.fire(e)
			e.clock.Advance(100 * time.Millisecond)
			firedAt := e.clock.Now()
			ev.Evaluate(ctx)
			s := status()
			if !s.Firing || !s.Since.Equal(firedAt) || s.Threshold != tc.wantThreshold || !near(s.Value, tc.wantValue) || s.Summary == "" {
				t.Fatalf("after fire: %+v, want firing since %v with value %g, threshold %g", s, firedAt, tc.wantValue, tc.wantThreshold)
			}
			if firing, _ := obs.isFiring(tc.rule); !firing {
				t.Errorf("observer: %s not firing", tc.rule)
			}
			for _, other := range ev.Status() {
				if other.Rule != tc.rule && other.Firing {
					t.Errorf("rule %s fires too: %+v", other.Rule, other)
				}
			}
			n := recv.next(t, 10*time.Second)
			wantStart := firedAt.UTC().Format(alert.TimeFormat)
			if n.Rule != tc.rule || n.State != alert.StateFiring || !near(n.Value, tc.wantValue) || n.Threshold != tc.wantThreshold ||
				n.StartedAt == nil || *n.StartedAt != wantStart || n.ResolvedAt != nil || n.Summary != s.Summary {
				t.Errorf("firing notification %+v, want rule %s firing value %g threshold %g started_at %s", n, tc.rule, tc.wantValue, tc.wantThreshold, wantStart)
			}

			// Still firing: no second notification.
			e.clock.Advance(100 * time.Millisecond)
			ev.Evaluate(ctx)
			if s := status(); !s.Firing || !s.Since.Equal(firedAt) {
				t.Errorf("still firing: %+v", s)
			}

			tc.calm(e)
			e.clock.Advance(100 * time.Millisecond)
			resolvedAt := e.clock.Now()
			ev.Evaluate(ctx)
			if s := status(); s.Firing || !s.Since.IsZero() {
				t.Errorf("after calm: %+v, want not firing", s)
			}
			if firing, _ := obs.isFiring(tc.rule); firing {
				t.Errorf("observer: %s still firing", tc.rule)
			}
			n = recv.next(t, 10*time.Second)
			wantResolved := resolvedAt.UTC().Format(alert.TimeFormat)
			if n.Rule != tc.rule || n.State != alert.StateResolved || n.StartedAt == nil || *n.StartedAt != wantStart ||
				n.ResolvedAt == nil || *n.ResolvedAt != wantResolved {
				t.Errorf("resolve notification %+v, want rule %s resolved, started_at %s, resolved_at %s", n, tc.rule, wantStart, wantResolved)
			}
			ev.Evaluate(ctx)
			recv.none(t)
			if got := recv.attempts.Load(); got != 2 {
				t.Errorf("receiver got %d POSTs, want 2 (one firing, one resolve)", got)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	f := &fakeCounts{}
	rec := alert.NewRecorder(nil)
	ok := alert.Config{Backlog: f, Activity: rec}
	for _, tc := range []struct {
		name    string
		edit    func(c *alert.Config)
		wantErr string // "" for valid
	}{
		{"defaults", func(*alert.Config) {}, ""},
		{"manual interval", func(c *alert.Config) { c.Interval = -1 }, ""},
		{"no backlog", func(c *alert.Config) { c.Backlog = nil }, "Backlog and Activity are required"},
		{"no activity", func(c *alert.Config) { c.Activity = nil }, "Backlog and Activity are required"},
		{"negative backlog", func(c *alert.Config) { c.Thresholds.CloseBacklog = -1 }, "close backlog threshold"},
		{"negative lateness", func(c *alert.Config) { c.Thresholds.CloseLatenessP99 = -time.Second }, "close lateness p99"},
		{"rate of 1", func(c *alert.Config) { c.Thresholds.CloseFailureRate = 1 }, "close failure rate threshold must be in [0, 1)"},
		{"negative releases", func(c *alert.Config) { c.Thresholds.StockReleaseFailures = -1 }, "stock release failures"},
		{"negative dead letters", func(c *alert.Config) { c.Thresholds.DeadLetters = -1 }, "dead letters threshold"},
		{"interval too long", func(c *alert.Config) { c.Interval = 2 * time.Hour }, "interval must be between"},
		{"window too short", func(c *alert.Config) { c.Window = time.Millisecond }, "window must be between 1s and 5m0s"},
		{"window too long", func(c *alert.Config) { c.Window = 10 * time.Minute }, "window must be between 1s and 5m0s"},
		{"webhook not http", func(c *alert.Config) { c.Webhook.URL = "ftp://x/y" }, "absolute http(s) URL"},
		{"webhook relative", func(c *alert.Config) { c.Webhook.URL = "/alerts" }, "absolute http(s) URL"},
		{"webhook attempts", func(c *alert.Config) { c.Webhook = alert.WebhookConfig{URL: "http://a", Attempts: -1} }, "attempts must be 0..100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := alert.New(c)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("New: %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("New: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	// Without a dead-letter source there is no dead-letters rule.
	ev, err := alert.New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ev.Rules(), []string{alert.RuleCloseBacklog, alert.RuleCloseLatenessP99, alert.RuleCloseFailureRate, alert.RuleStockReleaseFailures}; !slices.Equal(got, want) {
		t.Errorf("Rules() = %v, want %v", got, want)
	}
	for _, s := range ev.Status() {
		if s.Rule == alert.RuleCloseBacklog && s.Threshold != alert.CloseBacklogDefault {
			t.Errorf("default backlog threshold = %g, want %d", s.Threshold, alert.CloseBacklogDefault)
		}
	}
}

// TestEvaluationErrorKeepsState: a rule whose value cannot be read keeps
// firing (no resolve is sent for an outage of the database) and reports
// the error; Ready holds evaluation back.
func TestEvaluationErrorKeepsState(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	counts := &fakeCounts{backlog: 10}
	var ready atomic.Bool
	ev, err := alert.New(alert.Config{
		Backlog: counts, Activity: alert.NewRecorder(clock), Thresholds: alert.Thresholds{CloseBacklog: 5},
		Interval: -1, Ready: ready.Load, Clock: clock, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	backlog := func() alert.Status { return ev.Status()[0] }
	ev.Evaluate(t.Context())
	if s := backlog(); s.Firing || s.Value != 0 {
		t.Fatalf("before ready: %+v, want not evaluated", s)
	}
	ready.Store(true)
	ev.Evaluate(t.Context())
	if s := backlog(); !s.Firing || s.Value != 10 {
		t.Fatalf("ready: %+v, want firing at 10", s)
	}
	counts.set(func(f *fakeCounts) { f.err = errors.New("database is locked") })
	ev.Evaluate(t.Context())
	if s := backlog(); !s.Firing || s.Value != 10 || !strings.Contains(s.Err, "database is locked") {
		t.Fatalf("on error: %+v, want still firing at 10 with the error", s)
	}
	counts.set(func(f *fakeCounts) { f.err, f.backlog = nil, 0 })
	ev.Evaluate(t.Context())
	if s := backlog(); s.Firing || s.Err != "" {
		t.Fatalf("recovered: %+v, want resolved without error", s)
	}
}

// TestWebhookGivesUpAndKeepsOrder: a notification that fails every attempt
// is dropped after Attempts POSTs, and the next one is still delivered, in
// order.
func TestWebhookGivesUpAndKeepsOrder(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	counts := &fakeCounts{}
	recv := newReceiver(t, 3) // the firing's 3 attempts fail
	ev, err := alert.New(alert.Config{
		Backlog: counts, Activity: alert.NewRecorder(clock), Thresholds: alert.Thresholds{CloseBacklog: 5},
		Interval: -1, Clock: clock, Logger: slog.New(slog.DiscardHandler),
		Webhook: alert.WebhookConfig{URL: recv.URL, Attempts: 3, Backoff: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ev.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	counts.set(func(f *fakeCounts) { f.backlog = 6 })
	ev.Evaluate(ctx)
	counts.set(func(f *fakeCounts) { f.backlog = 0 })
	ev.Evaluate(ctx)
	n := recv.next(t, 10*time.Second)
	if n.State != alert.StateResolved {
		t.Errorf("delivered %+v, want the resolve (the firing failed all its attempts)", n)
	}
	if got := recv.attempts.Load(); got != 4 {
		t.Errorf("receiver saw %d POSTs, want 3 failed + 1", got)
	}
}
