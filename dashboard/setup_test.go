package dashboard_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/dashboard"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/node/nodetest"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/webhook"
)

// server is an in-process hourglass started through node.New
// (nodetest): the SQLite store in a temp dir, the engine, the webhook
// delivery service (retrying after 10ms and 20ms, loopback allowed), the
// alert evaluator (every 100ms), the dashboard, and the API over real
// HTTP on 127.0.0.1 with a token.
type server struct {
	URL    string
	Token  string
	Client *api.Client
	logs   *syncBuffer
}

const (
	testToken       = "s3cret-token"
	testViewerToken = "v1ewer-token"
)

func startServer(t *testing.T) *server {
	t.Helper()
	logs := &syncBuffer{}
	allow, err := webhook.ParseAllowList("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{
		Store:  store.Options{DataDir: t.TempDir()},
		Engine: engine.Config{SweepInterval: 100 * time.Millisecond, SweepGrace: 300 * time.Millisecond},
		Webhooks: webhook.Config{Allow: allow, Retry: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}, Jitter: -1,
			PollInterval: 50 * time.Millisecond},
		Alerts:       node.Alerts{Interval: 100 * time.Millisecond},
		Cluster:      node.Cluster{NodeID: "dash-node"},
		Tokens:       []string{testToken},
		ViewerTokens: []string{testViewerToken},
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	url := nodetest.URL(n)
	return &server{URL: url, Token: testToken, Client: api.NewClient(url, testToken, nil), logs: logs}
}

// call sends a request with the token (unless withToken is false) and
// returns the status, headers and body.
func (s *server) call(t *testing.T, method, path string, withToken bool) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if withToken {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// snapshot returns GET /v1/dashboard.
func (s *server) snapshot(t *testing.T) dashboard.Snapshot {
	t.Helper()
	var snap dashboard.Snapshot
	if _, err := s.Client.Do(t.Context(), http.MethodGet, "/v1/dashboard", nil, nil, &snap); err != nil {
		t.Fatalf("GET /v1/dashboard: %v", err)
	}
	return snap
}

// countByAPI counts the orders GET /v1/orders?status= lists.
func (s *server) countByAPI(t *testing.T, status string) int64 {
	t.Helper()
	var n int64
	var after int64
	for {
		l, err := s.Client.ListOrders(t.Context(), status, api.MaxListLimit, after)
		if err != nil {
			t.Fatalf("list %s orders: %v", status, err)
		}
		n += int64(len(l.Orders))
		if l.Next == nil {
			return n
		}
		after = *l.Next
	}
}

// orderMix creates 10 orders in every state: pending (one due in an hour,
// two in 2 minutes), paid,
// shipped, completed, cancelled, and closed by their deadline (waited for).
// It returns the count per status.
func (s *server) orderMix(t *testing.T) map[string]int64 {
	t.Helper()
	ctx := t.Context()
	if _, err := s.Client.PutProduct(ctx, "MUG-1", "Mug", "kitchen", 1000); err != nil {
		t.Fatal(err)
	}
	create := func(timeout time.Duration) api.OrderJSON {
		t.Helper()
		var o api.OrderJSON
		body := map[string]any{"user_id": "u1", "items": []map[string]any{{"sku": "MUG-1", "quantity": 1}}, "timeout_ms": timeout.Milliseconds()}
		if _, err := s.Client.Do(ctx, http.MethodPost, "/v1/orders", nil, body, &o); err != nil {
			t.Fatalf("create order: %v", err)
		}
		return o
	}
	do := func(id int64, action string, body any) {
		t.Helper()
		if _, err := s.Client.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/orders/%d/%s", id, action), nil, body, nil); err != nil {
			t.Fatalf("%s order %d: %v", action, id, err)
		}
	}
	want := map[string]int64{}
	var closing []int64
	for range 2 {
		closing = append(closing, create(time.Second).ID)
	}
	create(time.Hour)
	for range 2 {
		create(2 * time.Minute) // on the timeline of closes due
	}
	want["pending_payment"] = 3
	for i := range 4 {
		o := create(time.Hour)
		do(o.ID, "pay", map[string]string{"payment_id": fmt.Sprint("pay-", o.ID)})
		switch i {
		case 0:
			want["paid"]++
		case 1:
			do(o.ID, "ship", nil)
			want["shipped"]++
		default:
			do(o.ID, "ship", nil)
			do(o.ID, "complete", nil)
			want["completed"]++
		}
	}
	do(create(time.Hour).ID, "cancel", nil)
	want["cancelled"] = 1
	want["closed"] = int64(len(closing))
	testenv.Eventually(t, 15*time.Second, "short orders closed", func() bool {
		for _, id := range closing {
			var o api.OrderJSON
			if _, err := s.Client.Do(ctx, http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), nil, nil, &o); err != nil || o.ClosedAt == nil {
				return false
			}
		}
		return true
	})
	return want
}

// timerMix arms 4 timers: 2 due in 100ms (waited for until fired), one
// due in an hour, and one cancelled. It returns the count per status.
func (s *server) timerMix(t *testing.T) map[string]int64 {
	t.Helper()
	ctx := t.Context()
	arm := func(key string, delay time.Duration) {
		t.Helper()
		if _, _, err := s.Client.ArmTimer(ctx, key, api.ArmTimerRequest{DelayMs: api.Delay(delay)}); err != nil {
			t.Fatalf("arm timer %s: %v", key, err)
		}
	}
	arm("soon-1", 100*time.Millisecond)
	arm("soon-2", 100*time.Millisecond)
	arm("later", time.Hour)
	arm("dropped", time.Hour)
	if _, err := s.Client.CancelTimer(ctx, "dropped"); err != nil {
		t.Fatalf("cancel timer: %v", err)
	}
	testenv.Eventually(t, 15*time.Second, "short timers fired", func() bool {
		return s.countTimersByAPI(t, "fired") == 2
	})
	return map[string]int64{"scheduled": 1, "fired": 2, "cancelled": 1}
}

// countTimersByAPI counts the timers GET /v1/timers?status= lists.
func (s *server) countTimersByAPI(t *testing.T, status string) int64 {
	t.Helper()
	var n int64
	after := ""
	for {
		l, err := s.Client.ListTimers(t.Context(), status, api.MaxTimerLimit, after)
		if err != nil {
			t.Fatalf("list %s timers: %v", status, err)
		}
		n += int64(len(l.Timers))
		if l.Next == nil {
			return n
		}
		after = *l.Next
	}
}

func mustJSON(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
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
