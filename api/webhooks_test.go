package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/node/nodetest"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/webhook"
)

const hookSecret = "whsec-api-0123456789"

// startWebhookServer is startServer with webhooks: the webhook service over
// the same store, with the allow-list and retry schedule given (no jitter),
// running until the test ends.
func startWebhookServer(t *testing.T, allow string, retry ...time.Duration) *testServer {
	t.Helper()
	return startWebhookServerWith(t, allow, func(c *webhook.Config) { c.Retry = retry })
}

// startWebhookServerWith is startWebhookServer with the webhook
// configuration adjusted by change.
func startWebhookServerWith(t *testing.T, allow string, change func(*webhook.Config)) *testServer {
	t.Helper()
	logs := &syncBuffer{}
	list, err := webhook.ParseAllowList(allow)
	if err != nil {
		t.Fatal(err)
	}
	cfg := webhook.Config{Allow: list, Jitter: -1, Timeout: 5 * time.Second,
		PollInterval: 50 * time.Millisecond, Window: 2 * time.Second, LoadInterval: 500 * time.Millisecond}
	change(&cfg)
	n := nodetest.Start(t, node.Config{
		Store:    store.Options{DataDir: t.TempDir()},
		Engine:   engine.Config{SweepInterval: 200 * time.Millisecond, SweepGrace: 500 * time.Millisecond},
		Webhooks: cfg,
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	hc := &http.Client{Timeout: 30 * time.Second}
	url := nodetest.URL(n)
	return &testServer{URL: url, Client: api.NewClient(url, "", hc), HTTP: hc, logs: logs}
}

// hookReceiver is a real HTTP endpoint on 127.0.0.1 recording deliveries.
type hookReceiver struct {
	URL string

	mu    sync.Mutex
	fail  func(nth int) bool // whether to answer 500 to the nth request of an event
	reqs  []hookRequest
	wakes chan struct{}
}

type hookRequest struct {
	status int
	event  api.EventJSON
	raw    []byte
	sigErr error
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	rc := &hookReceiver{wakes: make(chan struct{}, 10000)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		req := hookRequest{status: http.StatusOK, raw: raw}
		req.sigErr = webhook.Verify(r.Header.Get(webhook.SignatureHeader), hookSecret, raw, time.Now(), 5*time.Minute)
		if err := json.Unmarshal(raw, &req.event); err != nil {
			req.sigErr = fmt.Errorf("body %s: %v", raw, err)
		}
		rc.mu.Lock()
		nth := 1
		for _, p := range rc.reqs {
			if p.event.ID == req.event.ID {
				nth++
			}
		}
		if rc.fail != nil && rc.fail(nth) {
			req.status = http.StatusInternalServerError
		}
		rc.reqs = append(rc.reqs, req)
		rc.mu.Unlock()
		w.WriteHeader(req.status)
		rc.wakes <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *hookReceiver) setFail(f func(nth int) bool) {
	rc.mu.Lock()
	rc.fail = f
	rc.mu.Unlock()
}

func (rc *hookReceiver) requests() []hookRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.reqs)
}

// delivered returns the events answered 2xx, in arrival order.
func (rc *hookReceiver) delivered() []hookRequest {
	var out []hookRequest
	for _, r := range rc.requests() {
		if r.status == http.StatusOK {
			out = append(out, r)
		}
	}
	return out
}

func (rc *hookReceiver) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-rc.wakes:
		case <-timeout:
			t.Fatalf("%s: not after 20s (%d requests)", what, len(rc.requests()))
		}
	}
}

func (s *testServer) createWebhook(t *testing.T, url string, events ...string) api.WebhookJSON {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"url": url, "events": events, "secret": hookSecret})
	status, _, raw := s.call(t, http.MethodPost, "/v1/webhooks", nil, body)
	if status != http.StatusCreated {
		t.Fatalf("create webhook: %d %s", status, raw)
	}
	var w api.WebhookJSON
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWebhookAPI: create, list, get and delete webhooks; the secret is never
// returned; bad input is a 400 naming what is wrong; unknown ids are 404.
func TestWebhookAPI(t *testing.T) {
	t.Parallel()
	s := startWebhookServer(t, "hooks.example.com,127.0.0.1:9")

	status, _, raw := s.call(t, http.MethodPost, "/v1/webhooks", nil,
		[]byte(`{"url":"https://hooks.example.com/h","events":["order.paid","order.closed"],"secret":"`+hookSecret+`"}`))
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, raw)
	}
	if bytes.Contains(raw, []byte(hookSecret)) || bytes.Contains(raw, []byte("secret")) {
		t.Errorf("create echoes the secret: %s", raw)
	}
	var fields map[string]json.RawMessage
	json.Unmarshal(raw, &fields)
	if keys := slices.Sorted(mapsKeys(fields)); !slices.Equal(keys, []string{"created_at", "events", "id", "url"}) {
		t.Errorf("webhook fields %v", keys)
	}
	var w api.WebhookJSON
	json.Unmarshal(raw, &w)
	if w.ID <= 0 || w.URL != "https://hooks.example.com/h" || !slices.Equal(w.Events, []string{"order.paid", "order.closed"}) || !apiTime.MatchString(w.CreatedAt) {
		t.Errorf("created webhook %+v", w)
	}
	all := s.createWebhook(t, "http://127.0.0.1:9/x", "*")

	status, _, raw = s.call(t, http.MethodGet, "/v1/webhooks", nil, nil)
	var list api.WebhookListJSON
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list.Webhooks) != 2 || !reflect.DeepEqual(list.Webhooks[0], w) || list.Webhooks[1].ID != all.ID {
		t.Errorf("list: %d %s", status, raw)
	}
	if bytes.Contains(raw, []byte(hookSecret)) {
		t.Errorf("list shows the secret: %s", raw)
	}
	status, _, raw = s.call(t, http.MethodGet, fmt.Sprintf("/v1/webhooks/%d", all.ID), nil, nil)
	if status != http.StatusOK || !bytes.Contains(raw, []byte(`"events":["*"]`)) {
		t.Errorf("get: %d %s", status, raw)
	}

	valid := map[string]any{"url": "https://hooks.example.com/h", "events": []string{"order.paid"}, "secret": hookSecret}
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for k, v := range valid {
			m[k] = v
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	bad := []struct {
		name string
		body []byte
		want string // in the message
	}{
		{"empty", nil, "request body is empty"},
		{"not an object", []byte(`[]`), "JSON object"},
		{"unknown field", []byte(`{"url":"https://hooks.example.com/h","events":["order.paid"],"secret":"` + hookSecret + `","x":1}`), `unknown field "x"`},
		{"no url", with("url", nil), "url: required"},
		{"url not a string", with("url", 5), "url"},
		{"ftp url", with("url", "ftp://hooks.example.com/h"), "scheme must be http or https"},
		{"host not allowed", with("url", "https://evil.example.com/h"), "host evil.example.com:443 is not in the webhook allow-list"},
		{"loopback not listed", with("url", "http://127.0.0.1:8080/h"), "host 127.0.0.1:8080 is not in the webhook allow-list"},
		{"localhost not listed", with("url", "http://localhost:9/h"), "allowed only when listed"},
		{"metadata endpoint", with("url", "http://169.254.169.254/latest"), "allowed only when listed"},
		{"no events", with("events", nil), "events: required"},
		{"empty events", with("events", []string{}), "at least one event type"},
		{"unknown event", with("events", []string{"order.lost"}), `unknown event type "order.lost"`},
		{"null event", with("events", []any{nil}), "events[0]: must be a string"},
		{"duplicate event", with("events", []string{"order.paid", "order.paid"}), "more than once"},
		{"no secret", with("secret", nil), "secret: required"},
		{"short secret", with("secret", "short"), "secret: must be 16 to 256 bytes, got 5"},
		{"long secret", with("secret", strings.Repeat("s", 257)), "got 257"},
		{"url twice", []byte(`{"url":"https://evil.example.com/h","url":"https://hooks.example.com/h","events":["order.paid"],"secret":"` + hookSecret + `"}`), "url: given more than once"},
		{"URL in upper case", []byte(`{"URL":"https://hooks.example.com/h","events":["order.paid"],"secret":"` + hookSecret + `"}`), "case-sensitive"},
	}
	for _, tt := range bad {
		status, _, raw := s.call(t, http.MethodPost, "/v1/webhooks", nil, tt.body)
		checkError(t, tt.name, status, raw, http.StatusBadRequest, "invalid_argument")
		var eb struct{ Error struct{ Message string } }
		json.Unmarshal(raw, &eb)
		if !strings.Contains(eb.Error.Message, tt.want) {
			t.Errorf("%s: message %q lacks %q", tt.name, eb.Error.Message, tt.want)
		}
	}
	for _, tt := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/webhooks/999", 404, "not_found"},
		{"DELETE", "/v1/webhooks/999", 404, "not_found"},
		{"GET", "/v1/webhooks/abc", 400, "invalid_argument"},
		{"DELETE", "/v1/webhooks/0", 400, "invalid_argument"},
		{"GET", fmt.Sprintf("/v1/webhooks/0%d", all.ID), 400, "invalid_argument"},
		{"GET", fmt.Sprintf("/v1/webhooks/+%d", all.ID), 400, "invalid_argument"},
		{"DELETE", "/v1/deadletters/01", 400, "invalid_argument"},
		{"PUT", "/v1/webhooks", 405, "method_not_allowed"},
		{"GET", "/v1/webhooks?x=1", 400, "invalid_argument"},
		{"POST", "/v1/deadletters/999/retry", 404, "not_found"},
		{"DELETE", "/v1/deadletters/999", 404, "not_found"},
		{"POST", "/v1/deadletters/-1/retry", 400, "invalid_argument"},
		{"GET", "/v1/deadletters?limit=0", 400, "invalid_argument"},
		{"GET", "/v1/deadletters?limit=1001", 400, "invalid_argument"},
		{"GET", "/v1/deadletters?after=x", 400, "invalid_argument"},
		{"GET", "/v1/deadletters?status=dead", 400, "invalid_argument"},
	} {
		status, _, raw := s.call(t, tt.method, tt.path, nil, nil)
		checkError(t, tt.method+" "+tt.path, status, raw, tt.status, tt.code)
	}

	status, _, raw = s.call(t, http.MethodDelete, fmt.Sprintf("/v1/webhooks/%d", w.ID), nil, nil)
	if status != http.StatusOK || !bytes.Contains(raw, []byte(fmt.Sprintf(`"id":%d`, w.ID))) {
		t.Errorf("delete: %d %s", status, raw)
	}
	status, _, raw = s.call(t, http.MethodDelete, fmt.Sprintf("/v1/webhooks/%d", w.ID), nil, nil)
	checkError(t, "delete twice", status, raw, http.StatusNotFound, "not_found")
	if ws, err := s.Client.Webhooks(t.Context()); err != nil || len(ws) != 1 || ws[0].ID != all.ID {
		t.Errorf("after delete: %+v, %v", ws, err)
	}
	status, _, raw = s.call(t, http.MethodGet, "/v1/deadletters", nil, nil)
	if status != http.StatusOK || string(raw) != "{\"deadletters\":[],\"next\":null}\n" {
		t.Errorf("empty dead letters: %d %s", status, raw)
	}
}

func mapsKeys(m map[string]json.RawMessage) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestWebhookDeliveries: order events made through the API reach a real
// receiver, signed, with the order exactly as the API shows it; a receiver
// failing the first three attempts gets the event once, on the fourth; the
// engine's close is an event too.
func TestWebhookDeliveries(t *testing.T) {
	t.Parallel()
	s := startWebhookServer(t, "127.0.0.1", 20*time.Millisecond, 40*time.Millisecond, 80*time.Millisecond)
	rc := newHookReceiver(t)
	s.createWebhook(t, rc.URL+"/hooks", "*")
	s.putProduct(t, "mug", "kitchen", 10)

	rc.setFail(func(nth int) bool { return nth <= 3 })
	created := s.createOrder(t, `{"user_id":"u1","items":[{"sku":"mug","quantity":2}],"timeout_ms":60000}`)
	rc.wait(t, "the created event", func() bool { return len(rc.delivered()) == 1 })
	reqs := rc.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests for the created event, want 4 (3 failures, then the success)", len(reqs))
	}
	rc.setFail(nil)
	for i, r := range reqs {
		if r.sigErr != nil || r.event.ID != reqs[0].event.ID || !bytes.Equal(r.raw, reqs[0].raw) {
			t.Errorf("attempt %d: %v, %s", i+1, r.sigErr, r.raw)
		}
	}
	ev := reqs[3].event
	if ev.Type != "order.created" || !strings.HasPrefix(ev.ID, "evt_") || ev.CreatedAt != created.CreatedAt || ev.Order.ID != created.ID {
		t.Errorf("created event %+v", ev)
	}
	if got, want := orderOf(t, reqs[3].raw), s.rawOrder(t, created.ID); got != want {
		t.Errorf("event order\n got %s\nwant %s (GET /v1/orders/%d)", got, want, created.ID)
	}

	pay, err := s.Client.Pay(t.Context(), created.ID, "pay-1")
	if err != nil {
		t.Fatal(err)
	}
	rc.wait(t, "the paid event", func() bool { return len(rc.delivered()) == 2 })
	if got, want := orderOf(t, rc.delivered()[1].raw), s.rawOrder(t, pay.ID); got != want {
		t.Errorf("paid event order\n got %s\nwant %s", got, want)
	}

	toClose := s.createOrder(t, `{"user_id":"u2","items":[{"sku":"mug","quantity":1}],"timeout_ms":1000}`)
	rc.wait(t, "the closed event", func() bool { return len(rc.delivered()) == 4 })
	closed := rc.delivered()[3]
	if closed.event.Type != "order.closed" || closed.event.Order.ID != toClose.ID || closed.event.Order.CloseReason == nil ||
		*closed.event.Order.CloseReason != "timeout" || closed.event.Order.ClosedAt == nil {
		t.Errorf("closed event %s", closed.raw)
	}
	if got, want := orderOf(t, closed.raw), s.rawOrder(t, toClose.ID); got != want {
		t.Errorf("closed event order\n got %s\nwant %s", got, want)
	}
	var types []string
	for _, r := range rc.delivered() {
		types = append(types, r.event.Type)
	}
	if want := []string{"order.created", "order.paid", "order.created", "order.closed"}; !slices.Equal(types, want) {
		t.Errorf("delivered %v, want %v", types, want)
	}
}

func orderOf(t *testing.T, raw []byte) string {
	t.Helper()
	var body struct {
		Order json.RawMessage `json:"order"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	return string(body.Order)
}

// rawOrder returns GET /v1/orders/{id} as raw JSON, without the newline.
func (s *testServer) rawOrder(t *testing.T, id int64) string {
	t.Helper()
	status, _, raw := s.call(t, http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), nil, nil)
	if status != http.StatusOK {
		t.Fatalf("get order %d: %d %s", id, status, raw)
	}
	return strings.TrimSpace(string(raw))
}

// TestDeadLetterAPI: a receiver that always fails ends in GET
// /v1/deadletters; once it works, POST /v1/deadletters/{id}/retry delivers
// the event; DELETE removes a dead letter.
func TestDeadLetterAPI(t *testing.T) {
	t.Parallel()
	s := startWebhookServer(t, "127.0.0.1", 10*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond)
	rc := newHookReceiver(t)
	rc.setFail(func(int) bool { return true })
	hook := s.createWebhook(t, rc.URL, "order.created")
	s.putProduct(t, "mug", "kitchen", 10)
	o1 := s.createOrder(t, `{"user_id":"u1","items":[{"sku":"mug","quantity":1}]}`)
	o2 := s.createOrder(t, `{"user_id":"u2","items":[{"sku":"mug","quantity":1}]}`)

	var list api.DeadLetterListJSON
	testenv.Eventually(t, 20*time.Second, "two dead letters", func() bool {
		var err error
		list, err = s.Client.DeadLetters(t.Context(), 0, 0)
		return err == nil && len(list.DeadLetters) == 2
	})
	if len(rc.requests()) != 8 {
		t.Errorf("%d attempts, want 4 per event", len(rc.requests()))
	}
	status, _, raw := s.call(t, http.MethodGet, "/v1/deadletters?limit=1", nil, nil)
	var page map[string]json.RawMessage
	json.Unmarshal(raw, &page)
	var first []map[string]json.RawMessage
	json.Unmarshal(page["deadletters"], &first)
	if status != http.StatusOK || len(first) != 1 || string(page["next"]) != fmt.Sprint(list.DeadLetters[0].ID) {
		t.Fatalf("first page: %d %s", status, raw)
	}
	if keys := slices.Sorted(mapsKeys(first[0])); !slices.Equal(keys, []string{"attempts", "event_id", "event_type", "failed_at", "id", "last_error", "order_id", "webhook_id"}) {
		t.Errorf("dead letter fields %v", keys)
	}
	if l, _ := s.Client.DeadLetters(t.Context(), 1, list.DeadLetters[0].ID); len(l.DeadLetters) != 1 || l.DeadLetters[0].ID != list.DeadLetters[1].ID || l.Next != nil {
		t.Errorf("second page %+v", l)
	}
	for i, o := range []api.OrderJSON{o1, o2} {
		d := list.DeadLetters[i]
		if d.WebhookID != hook.ID || d.OrderID != o.ID || d.EventType != "order.created" || !strings.HasPrefix(d.EventID, "evt_") ||
			d.Attempts != 4 || d.LastError != "HTTP 500" || !apiTime.MatchString(d.FailedAt) {
			t.Errorf("dead letter %d: %+v", i, d)
		}
	}

	rc.setFail(nil)
	status, _, raw = s.call(t, http.MethodPost, fmt.Sprintf("/v1/deadletters/%d/retry", list.DeadLetters[0].ID), nil, nil)
	if status != http.StatusAccepted || string(raw) != fmt.Sprintf("{\"id\":%d,\"status\":\"pending\"}\n", list.DeadLetters[0].ID) {
		t.Fatalf("retry: %d %s", status, raw)
	}
	rc.wait(t, "the retried event", func() bool { return len(rc.delivered()) == 1 })
	if got := rc.delivered()[0]; got.event.ID != list.DeadLetters[0].EventID || got.sigErr != nil {
		t.Errorf("delivered %+v", got)
	}
	status, _, raw = s.call(t, http.MethodPost, fmt.Sprintf("/v1/deadletters/%d/retry", list.DeadLetters[0].ID), nil, nil)
	checkError(t, "retry a delivered dead letter", status, raw, http.StatusNotFound, "not_found")

	status, _, raw = s.call(t, http.MethodDelete, fmt.Sprintf("/v1/deadletters/%d", list.DeadLetters[1].ID), nil, nil)
	if status != http.StatusOK || !bytes.Contains(raw, []byte(list.DeadLetters[1].EventID)) {
		t.Fatalf("delete: %d %s", status, raw)
	}
	status, _, raw = s.call(t, http.MethodDelete, fmt.Sprintf("/v1/deadletters/%d", list.DeadLetters[1].ID), nil, nil)
	checkError(t, "delete twice", status, raw, http.StatusNotFound, "not_found")
	if l, _ := s.Client.DeadLetters(t.Context(), 0, 0); len(l.DeadLetters) != 0 {
		t.Errorf("dead letters left: %+v", l)
	}
}

// TestWebhookRoutesNeedTheToken: the webhook routes are /v1 routes.
func TestWebhookRoutesNeedTheToken(t *testing.T) {
	t.Parallel()
	// Without a WebhookService the routes do not exist, but a miss under /v1
	// still needs the token. A node always has one: this server is built
	// by hand, over a store it never reaches.
	srv, err := api.NewServer(api.Config{Store: struct{ hourglass.Store }{}, Engine: readyScheduler{}, Tokens: []string{"t0k"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	s := &testServer{URL: ts.URL, Token: "t0k", HTTP: ts.Client()}
	status, _, raw := s.call(t, http.MethodGet, "/v1/webhooks", http.Header{"Authorization": nil}, nil)
	checkError(t, "no token", status, raw, http.StatusUnauthorized, "unauthorized")
	status, _, raw = s.call(t, http.MethodGet, "/v1/webhooks", nil, nil)
	checkError(t, "no webhook service", status, raw, http.StatusNotFound, "not_found")
}

// TestMarshalOrderMatchesTheAPI: the order snapshot in events is the API's
// order object, byte for byte.
func TestMarshalOrderMatchesTheAPI(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 10, 0, 0, 5e6, time.UTC)
	orders := []hourglass.Order{
		{ID: 1, UserID: "u", Status: hourglass.StatePendingPayment, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, CreatedAt: at, Deadline: at.Add(time.Minute)},
		{ID: 2, UserID: "u\"<>", Status: hourglass.StatePaid, Items: []hourglass.Item{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: 3}}, CreatedAt: at, Deadline: at.Add(time.Minute), PaidAt: at.Add(time.Second), PaymentID: "p"},
		{ID: 3, UserID: "u", Status: hourglass.StateClosed, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, CreatedAt: at, Deadline: at.Add(time.Minute), ClosedAt: at.Add(time.Minute), CloseReason: "timeout"},
	}
	for _, o := range orders {
		want, err := json.Marshal(api.OrderJSONOf(o))
		if err != nil {
			t.Fatal(err)
		}
		if got := hourglass.MarshalOrder(o); !bytes.Equal(got, want) {
			t.Errorf("order %d:\nMarshalOrder %s\nAPI          %s", o.ID, got, want)
		}
	}
}

// TestWebhookLimitAndPaging: beyond MaxWebhooks a create is a 409
// limit_exceeded (10,000 webhooks once made every order create take
// seconds); deleting one makes room; GET /v1/webhooks is paged like the
// other lists.
func TestWebhookLimitAndPaging(t *testing.T) {
	t.Parallel()
	s := startWebhookServerWith(t, "hooks.example.com", func(c *webhook.Config) { c.MaxWebhooks = 3 })
	var ids []int64
	for i := range 3 {
		ids = append(ids, s.createWebhook(t, fmt.Sprintf("https://hooks.example.com/%d", i), "*").ID)
	}
	body := []byte(`{"url":"https://hooks.example.com/4","events":["*"],"secret":"` + hookSecret + `"}`)
	status, _, raw := s.call(t, http.MethodPost, "/v1/webhooks", nil, body)
	checkError(t, "fourth webhook", status, raw, http.StatusConflict, "limit_exceeded")
	if !bytes.Contains(raw, []byte("3")) {
		t.Errorf("limit_exceeded message does not say the limit: %s", raw)
	}

	var got []int64
	after := int64(0)
	for pages := 0; ; pages++ {
		path := "/v1/webhooks?limit=2"
		if after > 0 {
			path += fmt.Sprintf("&after=%d", after)
		}
		status, _, raw := s.call(t, http.MethodGet, path, nil, nil)
		var l api.WebhookListJSON
		if status != http.StatusOK || json.Unmarshal(raw, &l) != nil || len(l.Webhooks) > 2 {
			t.Fatalf("GET %s: %d %s", path, status, raw)
		}
		for _, w := range l.Webhooks {
			got = append(got, w.ID)
		}
		if l.Next == nil {
			if pages != 1 {
				t.Errorf("%d pages of 2 for 3 webhooks, want 2", pages+1)
			}
			break
		}
		after = *l.Next
	}
	if !slices.Equal(got, ids) {
		t.Errorf("paged ids %v, want %v", got, ids)
	}
	for _, path := range []string{"/v1/webhooks?limit=0", "/v1/webhooks?limit=1001", "/v1/webhooks?after=x"} {
		status, _, raw := s.call(t, http.MethodGet, path, nil, nil)
		checkError(t, "GET "+path, status, raw, http.StatusBadRequest, "invalid_argument")
	}
	if all, err := s.Client.Webhooks(t.Context()); err != nil || len(all) != 3 {
		t.Errorf("Client.Webhooks: %d, %v", len(all), err)
	}

	if status, _, raw := s.call(t, http.MethodDelete, fmt.Sprintf("/v1/webhooks/%d", ids[0]), nil, nil); status != http.StatusOK {
		t.Fatalf("delete: %d %s", status, raw)
	}
	if status, _, raw := s.call(t, http.MethodPost, "/v1/webhooks", nil, body); status != http.StatusCreated {
		t.Errorf("create after a delete made room: %d %s", status, raw)
	}
}
