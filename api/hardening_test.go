package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
)

// labelRecorder is an api.Observer that keeps every label pair it sees.
type labelRecorder struct {
	mu      sync.Mutex
	routes  map[string]bool
	methods map[string]bool
}

func (l *labelRecorder) ObserveRequest(route, method string, _ int, _ time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.routes[route] = true
	l.methods[method] = true
}

// TestMetricLabelsAreBounded: made-up methods and paths, sent without a
// token, end up as the one label "other": a client cannot grow the metrics
// (a label per unique method once took a server from 24 MB to 728 MB).
func TestMetricLabelsAreBounded(t *testing.T) {
	t.Parallel()
	rec := &labelRecorder{routes: map[string]bool{}, methods: map[string]bool{}}
	s := startServer(t, serverConfig{Token: "tok", Observer: rec})
	for i := range 50 {
		method := "X" + strings.Repeat("M", i) // a valid token, unique each time
		for _, path := range []string{"/healthz", "/readyz", "/v1/orders", "/nope/" + method, "/v1/" + method} {
			req, err := http.NewRequest(method, s.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.HTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	s.call(t, http.MethodGet, "/healthz", nil, nil)
	s.call(t, http.MethodGet, "/v1/orders/1", nil, nil)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for m := range rec.methods {
		if m != "GET" && m != "other" {
			t.Errorf("method label %q; want only known methods and \"other\"", m)
		}
	}
	for r := range rec.routes {
		if r != "other" && !strings.HasPrefix(r, "/") {
			t.Errorf("route label %q", r)
		}
		if strings.Contains(r, "XM") {
			t.Errorf("route label %q comes from the request", r)
		}
	}
	for _, want := range []string{"/healthz", "/readyz", "/v1/orders", "/v1/orders/{id}", "other"} {
		if !rec.routes[want] {
			t.Errorf("no route label %q; got %v", want, rec.routes)
		}
	}
	if len(rec.methods) != 2 {
		t.Errorf("method labels %v, want GET and other", rec.methods)
	}
}

// notReadyScheduler is a Scheduler during start-up: recovery has not run.
type notReadyScheduler struct{}

func (notReadyScheduler) Schedule(hourglass.Timer) {}
func (notReadyScheduler) Cancel(int64)             {}
func (notReadyScheduler) Ready() bool              { return false }
func (notReadyScheduler) Healthy() error           { return nil }

// TestReadyzDuringStartUpIsNotAnError: /readyz answers 503 until recovery
// has run, which is expected: it must not log an ERROR per probe.
func TestReadyzDuringStartUpIsNotAnError(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := api.NewServer(api.Config{Store: struct{ hourglass.Store }{}, Scheduler: notReadyScheduler{}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"unavailable"`) {
			t.Fatalf("/readyz: %d %s", w.Code, w.Body)
		}
	}
	if out := logs.String(); out != "" {
		t.Errorf("/readyz 503 during start-up logged:\n%s", out)
	}
}
