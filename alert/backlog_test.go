package alert_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/store/sqlite"
)

// TestBacklogFiresAndResolves is the "forced backlog": pending
// orders pile up past their deadline while the engine (the closer) is not
// running, the backlog rule fires once with a POST to a real HTTP receiver
// (whose first attempt fails, so the POST is retried), the metric says
// firing; then the engine starts, closes them, and exactly one resolve
// follows.
func TestBacklogFiresAndResolves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	clock := hourglass.SystemClock{}
	store, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Clock: clock, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.PutProduct(ctx, hourglass.Product{SKU: "mug", Available: 100}); err != nil {
		t.Fatal(err)
	}
	const orders, threshold = 8, 5
	var last hourglass.Order
	for i := range orders {
		o, _, err := store.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint("u", i), Items: []hourglass.Item{{SKU: "mug", Quantity: 1}}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		last = o
	}

	recv := newReceiver(t, 1) // the first POST fails
	rec := alert.NewRecorder(clock)
	m := metrics.New(func() int { return 0 })
	obs := &evaluations{Observer: m, done: make(chan int, 1000)}
	ev, err := alert.New(alert.Config{
		Backlog:    store,
		Activity:   rec,
		Thresholds: alert.Thresholds{CloseBacklog: threshold},
		Interval:   20 * time.Millisecond,
		Webhook:    alert.WebhookConfig{URL: recv.URL, Backoff: 10 * time.Millisecond},
		Observer:   obs,
		Clock:      clock,
		Logger:     logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every order overdue before the first evaluation: creating them may
	// take longer than their timeout on a loaded machine, and a first
	// evaluation between two deadlines would see part of the backlog.
	testenv.Phase(t, time.Until(last.Deadline)+10*time.Millisecond, "every order's deadline passes with no closer running")
	runCtx, stop := context.WithCancel(ctx)
	evDone := make(chan error, 1)
	go func() { evDone <- ev.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-evDone
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})

	n := recv.next(t, 30*time.Second)
	if n.Rule != alert.RuleCloseBacklog || n.State != alert.StateFiring || n.Value != orders || n.Threshold != threshold || n.StartedAt == nil || n.ResolvedAt != nil {
		t.Fatalf("first notification %+v, want close_backlog firing with value %d, threshold %d", n, orders, threshold)
	}
	started, err := time.Parse(time.RFC3339, *n.StartedAt)
	if err != nil || started.Before(last.Deadline) {
		t.Errorf("started_at %s: %v; want at or after the last deadline %v", *n.StartedAt, err, last.Deadline)
	}
	if got := recv.attempts.Load(); got != 2 {
		t.Errorf("receiver saw %d POSTs for the firing, want 2 (one failed, one retried)", got)
	}
	if got := scrape(t, m, `hourglass_alerts_firing{rule="close_backlog"}`); got != "1" {
		t.Errorf("hourglass_alerts_firing{rule=close_backlog} = %q, want 1", got)
	}
	if got := scrape(t, m, `hourglass_close_backlog`); got != fmt.Sprint(orders) {
		t.Errorf("hourglass_close_backlog = %q, want %d", got, orders)
	}
	if !strings.Contains(logs.String(), "alert: firing") {
		t.Errorf("no 'alert: firing' log line")
	}
	// More evaluations while it stays firing send nothing more.
	obs.wait(t, 5)
	recv.none(t)

	// Start the closer: start-up recovery closes the backlog.
	eng, err := engine.New(store, engine.Config{SweepInterval: 50 * time.Millisecond, Clock: clock, Logger: logger, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-engDone })

	n = recv.next(t, 30*time.Second)
	if n.Rule != alert.RuleCloseBacklog || n.State != alert.StateResolved || n.Value != 0 || n.StartedAt == nil || *n.StartedAt != started.UTC().Format(alert.TimeFormat) || n.ResolvedAt == nil {
		t.Fatalf("second notification %+v, want close_backlog resolved with value 0, started_at %s", n, started)
	}
	if resolved, err := time.Parse(time.RFC3339, *n.ResolvedAt); err != nil || resolved.Before(started) {
		t.Errorf("resolved_at %s before started_at %s (%v)", *n.ResolvedAt, *n.StartedAt, err)
	}
	if got := scrape(t, m, `hourglass_alerts_firing{rule="close_backlog"}`); got != "0" {
		t.Errorf("hourglass_alerts_firing{rule=close_backlog} = %q after resolve, want 0", got)
	}
	// The closes the engine made were recorded, with their lateness.
	if a := rec.Activity(clock.Now(), time.Minute); sumOf(a.Closed) != orders {
		t.Errorf("recorder saw %d closes, want %d", sumOf(a.Closed), orders)
	}
	obs.wait(t, 5)
	recv.none(t)
	if got := recv.attempts.Load(); got != 3 {
		t.Errorf("receiver saw %d POSTs in all, want 3", got)
	}
}

func sumOf(xs []int64) (t int64) {
	for _, x := range xs {
		t += x
	}
	return t
}

// evaluations wraps the metrics observer and signals each evaluation
// (CloseBacklog is reported once per evaluation).
type evaluations struct {
	alert.Observer
	done chan int
}

func (e *evaluations) CloseBacklog(n int) {
	e.Observer.CloseBacklog(n)
	select {
	case e.done <- n:
	default:
	}
}

// wait waits for n more evaluations.
func (e *evaluations) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-e.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("no evaluation within 30s")
		}
	}
}

// metricsText returns the registry in the Prometheus text format.
func metricsText(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// scrape returns the value of one series in the registry's text output.
func scrape(t *testing.T, m *metrics.Metrics, series string) string {
	t.Helper()
	for line := range strings.Lines(metricsText(t, m)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v
		}
	}
	return ""
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
