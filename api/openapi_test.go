package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/dashboard"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/retention"
	"github.com/hourglass/hourglass/store/sqlite"
	"github.com/hourglass/hourglass/webhook"

	_ "modernc.org/sqlite" // another process writing the store's file
)

// openAPIToken is the full server's API token.
const openAPIToken = "openapi-test-token"

// openAPIExempt are the documented statuses no request here can cause:
// 408 needs a body slower than 64 KiB/s for over a second, 500 a bug, and
// 503 (but /readyz's) a database that fails. Every other documented
// (operation, status) must be answered once in TestOpenAPI.
var openAPIExempt = []string{"408", "500", "503"}

// fullServer is an in-process hourglass with every optional part of the
// API configured, wired like cmd/hourglass's serve: SQLite in a temporary
// directory, the engine, webhook delivery (loopback allowed, 2 quick
// retries, at most 3 webhooks), timers limited to 3, alerts, the dashboard,
// a single-node cluster view, /metrics, two API tokens and a viewer token.
type fullServer struct {
	URL    string
	Server *api.Server
	// Store is its SQLite store; Dir the directory of its file.
	Store *sqlite.Store
	Dir   string
	// down makes /readyz answer 503 while set.
	down *atomic.Bool
}

// readiness is the engine, made not ready on demand.
// oneSource is a node's one source (--sources) with its bad rows: sources
// need PostgreSQL or MySQL, and this server runs on SQLite.
type oneSource struct {
	name string
	rows []hourglass.BadSourceRow
}

func (s oneSource) BadRowList(name string) ([]hourglass.BadSourceRow, int64, bool) {
	if name != s.name {
		return nil, 0, false
	}
	return s.rows, int64(len(s.rows)), true
}

func (s oneSource) HasSource(name string) bool { return name == s.name }

// PendingRows lists one pending row, key 9, due in an hour.
func (s oneSource) PendingRows(_ context.Context, name string, p hourglass.PendingDueParams) ([]hourglass.DueItem, bool, error) {
	if name != s.name {
		return nil, false, nil
	}
	return []hourglass.DueItem{{ID: 9, At: time.Now().Add(time.Hour)}}, true, nil
}

type readiness struct {
	*engine.Engine
	down *atomic.Bool
}

func (r readiness) Ready() bool { return !r.down.Load() && r.Engine.Ready() }

func startFullServer(t *testing.T) *fullServer {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clock := hourglass.SystemClock{}
	dir := t.TempDir()
	store, err := sqlite.Open(sqlite.Config{Dir: dir, Clock: clock, Logger: logger})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	m := metrics.New(func() int { return 0 })
	rec := alert.NewRecorder(clock)
	eng, err := engine.New(store, engine.Config{SweepInterval: 100 * time.Millisecond, SweepGrace: 300 * time.Millisecond, Clock: clock, Logger: logger, Observer: rec})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	allow, err := webhook.ParseAllowList("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := webhook.New(store, webhook.Config{
		Allow: allow, Retry: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}, Jitter: -1, MaxWebhooks: 3,
		PollInterval: 50 * time.Millisecond, Clock: clock, Logger: logger,
	})
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	ev, err := alert.New(alert.Config{Backlog: store, Activity: rec, DeadLetters: hooks, Interval: 100 * time.Millisecond,
		Ready: eng.Ready, Clock: clock, Logger: logger})
	if err != nil {
		t.Fatalf("alert.New: %v", err)
	}
	src, err := dashboard.New(dashboard.Config{Stats: store, Activity: rec, Alerts: ev, DeadLetters: hooks, Timers: store, Fanout: store, DeliveryLag: true, TimerRequests: store})
	if err != nil {
		t.Fatalf("dashboard.New: %v", err)
	}
	timers, err := retention.LimitTimers(store, retention.TimerLimitConfig{Max: 3, Clock: clock, Logger: logger})
	if err != nil {
		t.Fatalf("retention.LimitTimers: %v", err)
	}
	down := &atomic.Bool{}
	source := oneSource{"shop_orders", []hourglass.BadSourceRow{{Key: "7", Deadline: "-infinity", Reason: hourglass.BadDeadlineOutOfRange, FoundAt: clock.Now()}}}
	srv, err := api.NewServer(api.Config{
		Store: store, Engine: readiness{eng, down}, Clock: clock, Logger: logger, History: store, SourceRows: source,
		Tokens: []string{openAPIToken, openAPIOldToken}, ViewerTokens: []string{openAPIViewerToken},
		Observer: m, Metrics: m.Handler(), Webhooks: hooks, Dashboard: src, Timers: timers, TimerRequests: store, Bulk: store,
		Cluster: cluster.Single{ID: "openapi-node", Addr: "127.0.0.1:0", StartedAt: clock.Now(), Clock: clock},
		Sources: source,
	})
	if err != nil {
		t.Fatalf("api.NewServer: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for name, run := range map[string]func(context.Context) error{"engine": eng.Run, "webhooks": hooks.Run, "alerts": ev.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				t.Errorf("%s.Run: %v", name, err)
			}
		}()
	}
	t.Cleanup(func() {
		ts.Close()
		cancel()
		wg.Wait()
		if err := store.Close(); err != nil {
			t.Errorf("store.Close: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	testenv.Eventually(t, 10*time.Second, "engine ready", eng.Ready)
	return &fullServer{URL: ts.URL, Server: srv, Store: store, Dir: dir, down: down}
}

// loadOpenAPI parses and validates the served document and returns it
// with a router over its paths (its servers dropped: the test server is
// on another port).
func loadOpenAPI(t *testing.T, doc []byte) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		t.Fatalf("load the OpenAPI document: %v", err)
	}
	if !d.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q: want 3.1", d.OpenAPI)
	}
	if err := d.Validate(loader.Context); err != nil {
		t.Fatalf("the OpenAPI document is not valid: %v", err)
	}
	d.Servers = nil
	router, err := legacy.NewRouter(d)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	return d, router
}

// openAPICheck sends requests, validates them and their responses against
// the document, and records which (operation, status) pairs were answered.
type openAPICheck struct {
	t        *testing.T
	base     string
	router   routers.Router
	answered map[string]bool // "METHOD /path status"
}

// req is one request of the test.
type req struct {
	method, path string
	body         string
	header       map[string]string
	noToken      bool
	// invalid marks a request built to break the document's rules (its
	// 400s): only its response is validated.
	invalid bool
	want    int
}

// do sends r and returns the response body, failing the test when the
// status is not r.want or the request or response breaks the document.
func (c *openAPICheck) do(r req) []byte {
	c.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(c.t.Context(), r.method, c.base+r.path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	if !r.noToken {
		hr.Header.Set("Authorization", "Bearer "+openAPIToken)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	route, params, err := c.router.FindRoute(hr)
	if err != nil {
		c.t.Fatalf("%s %s: no operation in the document: %v", r.method, r.path, err)
	}
	input := &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if !r.invalid {
		// Validation reads the body; give the request a fresh copy after.
		if err := openapi3filter.ValidateRequest(c.t.Context(), input); err != nil {
			c.t.Errorf("%s %s: the request breaks the document: %v", r.method, r.path, err)
		}
		if r.body != "" {
			hr.Body = io.NopCloser(strings.NewReader(r.body))
		}
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		c.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode != r.want {
		c.t.Fatalf("%s %s: status %d, want %d: %s", r.method, r.path, resp.StatusCode, r.want, got)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: input, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(c.t.Context(), out); err != nil {
		c.t.Errorf("%s %s: the %d response breaks the document: %v\nbody: %.500s", r.method, r.path, resp.StatusCode, err, got)
	}
	c.answered[fmt.Sprintf("%s %s %d", route.Method, route.Path, resp.StatusCode)] = true
	return got
}

// receiver records the webhook deliveries it gets; on /fail it answers 500.
type receiver struct {
	mu    sync.Mutex
	got   []*http.Request
	body  [][]byte
	types map[string]bool
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/fail" {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r.Body = nil
	rc.got = append(rc.got, r)
	rc.body = append(rc.body, b)
	rc.types[r.Header.Get(webhook.EventTypeHeader)] = true
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) has(types []string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, et := range types {
		if !rc.types[et] {
			return false
		}
	}
	return true
}

// TestOpenAPI checks api/openapi.json against a real server: every route
// the server registers is in the document and the other way round; requests
// to every route, successes and each documented error, and their responses
// are valid against it; every documented (operation, status) is answered
// (but openAPIExempt's); and the webhook deliveries of every event type
// match the document's webhooks, signature included.
func TestOpenAPI(t *testing.T) {
	s := startFullServer(t)
	c := &openAPICheck{t: t, base: s.URL, answered: map[string]bool{}}

	// The served document is the embedded one.
	resp, err := http.Get(s.URL + api.OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(served, api.OpenAPI()) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %q, %d bytes: want 200 application/json, the embedded document", api.OpenAPIPath, resp.StatusCode, resp.Header.Get("Content-Type"), len(served))
	}
	doc, router := loadOpenAPI(t, served)
	c.router = router

	// Every registered route is documented, and every documented one is
	// registered.
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	registered := map[string]bool{}
	for _, r := range s.Server.Routes() {
		registered[r.Method+" "+r.Path] = true
		if !documented[r.Method+" "+r.Path] {
			t.Errorf("the server answers %s %s, the document does not describe it", r.Method, r.Path)
		}
	}
	for k := range documented {
		if !registered[k] {
			t.Errorf("the document describes %s, the server has no such route", k)
		}
	}

	rc := &receiver{types: map[string]bool{}}
	hooksSrv := httptest.NewServer(rc)
	t.Cleanup(hooksSrv.Close)
	const secret = "a-webhook-secret-of-32-bytes-xxx"

	// Public routes.
	c.do(req{method: "GET", path: "/healthz", noToken: true, want: 200})
	c.do(req{method: "GET", path: "/readyz", noToken: true, want: 200})
	s.down.Store(true)
	c.do(req{method: "GET", path: "/readyz", noToken: true, want: 503})
	s.down.Store(false)
	c.do(req{method: "GET", path: "/metrics", noToken: true, want: 200})
	c.do(req{method: "GET", path: api.OpenAPIPath, noToken: true, want: 200})

	// Products and the policy.
	c.do(req{method: "PUT", path: "/v1/products/sku-1", body: `{"name":"Mug","category":"home","available":100}`, want: 200})
	c.do(req{method: "PUT", path: "/v1/products/sku-1", body: `{"name":"Mug"}`, invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/products/sku-1", want: 200})
	c.do(req{method: "GET", path: "/v1/products/no-such-sku", want: 404})
	c.do(req{method: "GET", path: "/v1/products/bad%20sku", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/policies", want: 200})
	c.do(req{method: "PUT", path: "/v1/policies", body: `{"default_timeout_ms":60000,"categories":{"home":120000}}`, want: 200})
	c.do(req{method: "PUT", path: "/v1/policies", body: `{"default_timeout_ms":1}`, invalid: true, want: 400})

	// Webhooks: one receiver that takes everything, one that always fails
	// (its deliveries become dead letters).
	hook := c.do(req{method: "POST", path: "/v1/webhooks", body: fmt.Sprintf(`{"url":%q,"events":["*"],"secret":%q}`, hooksSrv.URL+"/ok", secret), want: 201})
	var wh api.WebhookJSON
	if err := json.Unmarshal(hook, &wh); err != nil {
		t.Fatal(err)
	}
	failing := c.do(req{method: "POST", path: "/v1/webhooks", body: fmt.Sprintf(`{"url":%q,"events":["order.created"],"secret":%q}`, hooksSrv.URL+"/fail", secret), want: 201})
	var fw api.WebhookJSON
	json.Unmarshal(failing, &fw)
	extra := c.do(req{method: "POST", path: "/v1/webhooks", body: fmt.Sprintf(`{"url":%q,"events":["order.paid"],"secret":%q}`, hooksSrv.URL+"/ok", secret), want: 201})
	var xw api.WebhookJSON
	json.Unmarshal(extra, &xw)
	c.do(req{method: "POST", path: "/v1/webhooks", body: fmt.Sprintf(`{"url":%q,"events":["order.paid"],"secret":%q}`, hooksSrv.URL+"/ok", secret), want: 409}) // MaxWebhooks 3
	c.do(req{method: "POST", path: "/v1/webhooks", body: `{"url":"http://127.0.0.1/"}`, invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/webhooks?limit=2", want: 200})
	c.do(req{method: "GET", path: "/v1/webhooks?limit=0", invalid: true, want: 400})
	c.do(req{method: "GET", path: fmt.Sprintf("/v1/webhooks/%d", wh.ID), want: 200})
	c.do(req{method: "GET", path: "/v1/webhooks/999999", want: 404})
	c.do(req{method: "GET", path: "/v1/webhooks/01", invalid: true, want: 400})
	c.do(req{method: "DELETE", path: fmt.Sprintf("/v1/webhooks/%d", xw.ID), want: 200})
	c.do(req{method: "DELETE", path: "/v1/webhooks/999999", want: 404})
	c.do(req{method: "DELETE", path: "/v1/webhooks/x", invalid: true, want: 400})

	// Orders through every transition.
	create := func(user string, timeoutMs int, key string, want int) api.OrderJSON {
		t.Helper()
		r := req{method: "POST", path: "/v1/orders", body: fmt.Sprintf(`{"user_id":%q,"items":[{"sku":"sku-1","quantity":1}],"timeout_ms":%d}`, user, timeoutMs), want: want}
		if key != "" {
			r.header = map[string]string{"Idempotency-Key": key}
		}
		var o api.OrderJSON
		if err := json.Unmarshal(c.do(r), &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	paid := create("u1", 60000, "key-1", 201)
	create("u1", 60000, "key-1", 200) // the same request again
	create("u2", 60000, "key-1", 409) // another request, the same key
	c.do(req{method: "POST", path: "/v1/orders", body: `{"user_id":"u1","items":[{"sku":"no-such-sku","quantity":1}]}`, want: 404})
	c.do(req{method: "POST", path: "/v1/orders", body: `{"user_id":"u1","items":[{"sku":"sku-1","quantity":10000}]}`, want: 409})
	c.do(req{method: "POST", path: "/v1/orders", body: `{"user_id":"u1"}`, invalid: true, want: 400})
	id := func(o api.OrderJSON) string { return fmt.Sprint(o.ID) }
	c.do(req{method: "GET", path: "/v1/orders/" + id(paid), want: 200})
	c.do(req{method: "GET", path: "/v1/orders/999999", want: 404})
	c.do(req{method: "GET", path: "/v1/orders/0", invalid: true, want: 400})
	c.do(req{method: "POST", path: "/v1/orders/" + id(paid) + "/ship", want: 409}) // not paid
	c.do(req{method: "POST", path: "/v1/orders/" + id(paid) + "/pay", body: `{"payment_id":"pay-1"}`, want: 200})
	c.do(req{method: "POST", path: "/v1/orders/999999/pay", body: `{"payment_id":"pay-1"}`, want: 404})
	c.do(req{method: "POST", path: "/v1/orders/" + id(paid) + "/pay", body: `{}`, invalid: true, want: 400})
	c.do(req{method: "POST", path: "/v1/orders/" + id(paid) + "/cancel", want: 409})   // paid
	c.do(req{method: "POST", path: "/v1/orders/" + id(paid) + "/complete", want: 409}) // not shipped
	c.do(req{method: "POST", path: "/v1/orders/" + id(paid) + "/ship", body: `{}`, want: 200})
	c.do(req{method: "POST", path: "/v1/orders/" + id(paid) + "/complete", want: 200})
	cancelled := create("u3", 60000, "", 201)
	c.do(req{method: "POST", path: "/v1/orders/" + id(cancelled) + "/cancel", want: 200})
	c.do(req{method: "POST", path: "/v1/orders/" + id(cancelled) + "/pay", body: `{"payment_id":"pay-2"}`, want: 409})
	for _, action := range []string{"cancel", "ship", "complete"} {
		c.do(req{method: "POST", path: "/v1/orders/999999/" + action, want: 404})
		c.do(req{method: "POST", path: "/v1/orders/" + id(cancelled) + "/" + action, body: `{"x":1}`, invalid: true, want: 400})
	}
	extended := create("u5", 60000, "", 201)
	c.do(req{method: "POST", path: "/v1/orders/" + id(extended) + "/extend", body: `{"extend_ms":60000}`, want: 200}) // order.extended
	c.do(req{method: "POST", path: "/v1/orders/" + id(extended) + "/extend", body: `{"deadline":"2000-01-01T00:00:00.000Z"}`, want: 400})
	c.do(req{method: "POST", path: "/v1/orders/" + id(extended) + "/extend", body: `{"extend_ms":1000,"deadline":"2000-01-01T00:00:00.000Z"}`, invalid: true, want: 400})
	c.do(req{method: "POST", path: "/v1/orders/999999/extend", body: `{"extend_ms":1000}`, want: 404})
	c.do(req{method: "POST", path: "/v1/orders/" + id(cancelled) + "/extend", body: `{"extend_ms":1000}`, want: 409})
	create("u4", 1000, "", 201)                                                                                                                                         // closes at its deadline: order.closed
	c.do(req{method: "POST", path: "/v1/orders", body: `{"user_id":"u6","items":[{"sku":"sku-1","quantity":1}],"timeout_ms":3000,"remind_before_ms":1500}`, want: 201}) // order.expiring
	c.do(req{method: "POST", path: "/v1/orders", body: `{"user_id":"u6","items":[{"sku":"sku-1","quantity":1}],"remind_before_ms":999}`, want: 400})
	c.do(req{method: "GET", path: "/v1/orders?status=pending_payment&limit=1", want: 200})
	c.do(req{method: "GET", path: "/v1/orders?limit=1&after=" + id(paid), want: 200})
	c.do(req{method: "GET", path: "/v1/orders?status=lost", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/orders?user_id=u3&created_after=2000-01-01T00:00:00Z&limit=1", want: 200})
	c.do(req{method: "GET", path: "/v1/orders?deadline_after=2000-01-01T00:00:00Z&deadline_before=2999-01-01T00:00:00.5Z&limit=1", want: 200})
	c.do(req{method: "GET", path: "/v1/orders?deadline_after=2000-01-01T00:00:00Z&after=deadline:946684800000:1", want: 200})
	c.do(req{method: "GET", path: "/v1/orders?deadline_after=yesterday", invalid: true, want: 400})

	// Timers (at most 3).
	c.do(req{method: "PUT", path: "/v1/timers/t1", body: `{"delay_ms":600000,"payload":{"cart":"c1"}}`, want: 201})
	c.do(req{method: "PUT", path: "/v1/timers/t1", body: `{"delay_ms":600000,"payload":{"cart":"c1"}}`, want: 200})
	c.do(req{method: "PUT", path: "/v1/timers/t2", body: fmt.Sprintf(`{"delay_ms":0,"webhook_id":%d}`, wh.ID), want: 201}) // fires now: timer.fired
	c.do(req{method: "PUT", path: "/v1/timers/t3", body: `{"fire_at":"2026-01-01T00:00:00.000Z"}`, want: 201})
	c.do(req{method: "PUT", path: "/v1/timers/t4", body: `{"delay_ms":1000}`, want: 409}) // the fourth
	c.do(req{method: "PUT", path: "/v1/timers/t4", body: `{"delay_ms":1,"fire_at":"2026-01-01T00:00:00.000Z"}`, invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/timers/t1", want: 200})
	c.do(req{method: "GET", path: "/v1/timers/nope", want: 404})
	c.do(req{method: "GET", path: "/v1/timers/bad%20key", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/timers?status=scheduled&limit=1", want: 200})
	c.do(req{method: "GET", path: "/v1/timers?after=t1", want: 200})
	c.do(req{method: "GET", path: "/v1/timers?status=late", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/timers?prefix=t&fire_after=2000-01-01T00:00:00Z&limit=1", want: 200})
	c.do(req{method: "GET", path: "/v1/timers?fire_before=2999-01-01T00:00:00Z&after=fire_at:946684800000:1", want: 200})
	c.do(req{method: "GET", path: "/v1/timers?fire_before=soon", invalid: true, want: 400})
	c.do(req{method: "DELETE", path: "/v1/timers/t1", want: 200})
	c.do(req{method: "DELETE", path: "/v1/timers/nope", want: 404})
	c.do(req{method: "DELETE", path: "/v1/timers/bad%20key", invalid: true, want: 400})
	testenv.Eventually(t, 10*time.Second, "timer t2 fired", func() bool {
		var tm api.TimerJSON
		r, err := http.NewRequest("GET", s.URL+"/v1/timers/t2", nil)
		if err != nil {
			return false
		}
		r.Header.Set("Authorization", "Bearer "+openAPIToken)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&tm)
		return tm.Status == "fired"
	})
	c.do(req{method: "DELETE", path: "/v1/timers/t2", want: 409})

	// Every event type reaches the receiver.
	allTypes := []string{"order.created", "order.paid", "order.cancelled", "order.closed", "order.shipped", "order.completed", "order.extended", "order.expiring", "timer.fired"}
	testenv.Eventually(t, 15*time.Second, "a delivery of every event type", func() bool { return rc.has(allTypes) })

	// Dead letters, from the failing webhook.
	var dl api.DeadLetterListJSON
	testenv.Eventually(t, 10*time.Second, "dead letters", func() bool {
		dl = api.DeadLetterListJSON{}
		json.Unmarshal(c.do(req{method: "GET", path: "/v1/deadletters?limit=10", want: 200}), &dl)
		return len(dl.DeadLetters) >= 2
	})
	c.do(req{method: "GET", path: "/v1/deadletters?after=x", invalid: true, want: 400})
	c.do(req{method: "GET", path: fmt.Sprintf("/v1/deadletters?webhook_id=%d&event_type=order.created&failed_after=2000-01-01T00:00:00Z&limit=1", dl.DeadLetters[0].WebhookID), want: 200})
	c.do(req{method: "GET", path: "/v1/deadletters?failed_before=2999-01-01T00:00:00Z&after=failed_at:946684800000:1", want: 200})
	c.do(req{method: "GET", path: "/v1/deadletters?failed_after=later", invalid: true, want: 400})
	c.do(req{method: "POST", path: fmt.Sprintf("/v1/deadletters/%d/retry", dl.DeadLetters[0].ID), want: 202})
	c.do(req{method: "POST", path: "/v1/deadletters/999999/retry", want: 404})
	c.do(req{method: "POST", path: "/v1/deadletters/-1/retry", invalid: true, want: 400})
	c.do(req{method: "DELETE", path: fmt.Sprintf("/v1/deadletters/%d", dl.DeadLetters[1].ID), want: 200})
	c.do(req{method: "DELETE", path: "/v1/deadletters/999999", want: 404})
	c.do(req{method: "DELETE", path: "/v1/deadletters/1.5", invalid: true, want: 400})

	// Timer requests: one another process wrote that cannot be applied.
	shop, err := sql.Open("sqlite", "file:"+filepath.Join(s.Dir, sqlite.FileNameDefault)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	if _, err := shop.Exec(`INSERT INTO timer_requests (timer_key, action, delay_ms, payload) VALUES ('bad key', 'arm', 1000, '{"a":1}')`); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Store.ApplyTimerRequests(context.Background(), hourglass.TimerRequestsParams{Limit: 10, Room: hourglass.NoTimerLimit}); err != nil || res.Rejected != 1 {
		t.Fatalf("ApplyTimerRequests = %+v, %v; want the request rejected", res, err)
	}
	var rejected api.RejectedTimerRequestListJSON
	json.Unmarshal(c.do(req{method: "GET", path: "/v1/timer-requests/rejected?limit=10", want: 200}), &rejected)
	if len(rejected.Requests) != 1 || rejected.Requests[0].TimerKey == nil || *rejected.Requests[0].TimerKey != "bad key" {
		t.Errorf("rejected timer requests = %+v; want the one written", rejected)
	}
	c.do(req{method: "GET", path: "/v1/timer-requests/rejected?limit=0", invalid: true, want: 400})

	// Bulk actions (no runner here: a filtered action stays running) and
	// timer batches (--timer-max is 3, and t1 to t3 exist).
	c.do(req{method: "POST", path: "/v1/timers/batch", body: `{"arm":[{"key":"t1","delay_ms":600000,"payload":{"a":1}}],"cancel":["t3","nope"]}`, want: 200})
	c.do(req{method: "POST", path: "/v1/timers/batch", body: `{"arm":[{"key":"b9","delay_ms":600000}]}`, want: 409})
	c.do(req{method: "POST", path: "/v1/timers/batch", body: `{"arm":[{"key":"t1","delay_ms":1}],"cancel":["t1"]}`, want: 400})
	c.do(req{method: "POST", path: "/v1/bulk-actions", body: `{"action":"cancel_timers","reason":"r","ids":["t1","nope"]}`, want: 200})
	c.do(req{method: "POST", path: "/v1/bulk-actions", body: `{"action":"cancel_orders","reason":"r","filter":{"user_id":"u1"},"dry_run":true}`, want: 200})
	c.do(req{method: "POST", path: "/v1/bulk-actions", body: `{"action":"nope","reason":"r","ids":[1]}`, invalid: true, want: 400})
	var ba api.BulkActionJSON
	json.Unmarshal(c.do(req{method: "POST", path: "/v1/bulk-actions", body: `{"action":"delete_deadletters","reason":"r","filter":{"event_type":"order.created"},"rate":10}`, want: 202}), &ba)
	c.do(req{method: "POST", path: "/v1/bulk-actions", body: `{"action":"delete_deadletters","reason":"r","filter":{"event_type":"order.created"},"rate":10}`, want: 200})
	c.do(req{method: "GET", path: "/v1/bulk-actions/" + ba.ID, want: 200})
	c.do(req{method: "GET", path: "/v1/bulk-actions/nope", want: 404})
	c.do(req{method: "GET", path: "/v1/bulk-actions/bad%20id", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/bulk-actions?limit=1", want: 200})
	c.do(req{method: "GET", path: "/v1/bulk-actions?limit=0", invalid: true, want: 400})
	for i := range hourglass.MaxBulkRunning - 1 {
		c.do(req{method: "POST", path: "/v1/bulk-actions", body: fmt.Sprintf(`{"action":"cancel_timers","reason":"r","filter":{"prefix":"p%d"}}`, i), want: 202})
	}
	c.do(req{method: "POST", path: "/v1/bulk-actions", body: `{"action":"cancel_timers","reason":"r","filter":{"prefix":"q"}}`, want: 429})
	c.do(req{method: "POST", path: "/v1/bulk-actions/" + ba.ID + "/stop", want: 200})
	c.do(req{method: "POST", path: "/v1/bulk-actions/nope/stop", want: 404})
	c.do(req{method: "POST", path: "/v1/bulk-actions/bad%20id/stop", invalid: true, want: 400})

	// Operations.
	c.do(req{method: "GET", path: "/v1/dashboard", want: 200})
	c.do(req{method: "GET", path: "/v1/dashboard?x=1", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/whoami", want: 200})
	c.do(req{method: "GET", path: "/v1/whoami?x=1", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/cluster", want: 200})
	var bad api.SourceBadRowListJSON
	json.Unmarshal(c.do(req{method: "GET", path: "/v1/sources/shop_orders/bad-rows", want: 200}), &bad)
	if bad.Total != 1 || len(bad.Rows) != 1 || bad.Rows[0].Deadline != "-infinity" {
		t.Errorf("bad rows = %+v; want the one listed", bad)
	}
	c.do(req{method: "GET", path: "/v1/sources/nope/bad-rows", invalid: true, want: 404})

	// Histories: an order closed at its deadline, one extended, a fired
	// timer, and a source row closed (its event written as a source's
	// close writes it: sources need PostgreSQL or MySQL).
	c.do(req{method: "GET", path: "/v1/orders/" + id(paid) + "/history", want: 200})
	c.do(req{method: "GET", path: "/v1/orders/" + id(extended) + "/history", want: 200})
	c.do(req{method: "GET", path: "/v1/orders/999999/history", want: 404})
	c.do(req{method: "GET", path: "/v1/orders/01/history", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/timers/t2/history", want: 200})
	c.do(req{method: "GET", path: "/v1/timers/nope/history", want: 404})
	c.do(req{method: "GET", path: "/v1/timers/bad%20key/history", invalid: true, want: 400})
	closedAt := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := shop.Exec(`INSERT INTO events (id, type, order_id, created_at, body) VALUES ('evt_source', 'source.closed', ?, ?, ?)`,
		hourglass.SourceEventOrderID("shop_orders", 7), hourglass.UnixMilli(closedAt),
		string(hourglass.MarshalSourceEvent("evt_source", "shop_orders", 7, closedAt.Add(-time.Second), closedAt))); err != nil {
		t.Fatal(err)
	}
	var sh api.HistoryJSON
	json.Unmarshal(c.do(req{method: "GET", path: "/v1/sources/shop_orders/rows/7/history", want: 200}), &sh)
	if len(sh.Events) != 1 || sh.Timing.LatenessMs == nil || *sh.Timing.LatenessMs != 1000 || *sh.Timing.ClosedBy != api.Unknown {
		t.Errorf("source row history = %+v; want its close, 1000 ms late, by unknown", sh)
	}
	c.do(req{method: "GET", path: "/v1/sources/shop_orders/rows/8/history", want: 404})
	c.do(req{method: "GET", path: "/v1/sources/shop_orders/rows?status=pending&limit=10", want: 200})
	c.do(req{method: "GET", path: "/v1/sources/shop_orders/rows?status=closed&deadline_after=2000-01-01T00:00:00Z&after=seq:0", want: 200})
	c.do(req{method: "GET", path: "/v1/sources/shop_orders/rows?status=lost", invalid: true, want: 400})
	c.do(req{method: "GET", path: "/v1/sources/nope/rows?status=pending", want: 404})
	c.do(req{method: "GET", path: "/v1/sources/nope/rows/7/history", want: 404})
	c.do(req{method: "GET", path: "/v1/sources/shop_orders/rows/0/history", invalid: true, want: 400})

	// Every /v1 route: 401 without the token, 403 from another site's
	// page, and 413 for a body over 1 MiB where it takes one.
	big := `{"name":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`
	for _, rt := range s.Server.Routes() {
		if !strings.HasPrefix(rt.Path, "/v1/") || rt.Path == api.OpenAPIPath {
			continue
		}
		path := strings.NewReplacer("{sku}", "sku-1", "{id}", "1", "{key}", "t1", "{name}", "shop_orders").Replace(rt.Path)
		c.do(req{method: rt.Method, path: path, noToken: true, invalid: true, want: 401})
		c.do(req{method: rt.Method, path: path, header: map[string]string{"Sec-Fetch-Site": "cross-site"}, invalid: true, want: 403})
		if rt.Method != http.MethodGet {
			c.do(req{method: rt.Method, path: path, body: big, invalid: true, want: 413})
		}
	}

	// Every documented answer was given (but the exempt ones).
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				k := method + " " + path + " " + status
				if !c.answered[k] && !slices.Contains(openAPIExempt, status) {
					t.Errorf("%s is documented; no request here got it", k)
				}
			}
		}
	}

	// The deliveries match the document's webhooks, signature included.
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, r := range rc.got {
		et := r.Header.Get(webhook.EventTypeHeader)
		item := doc.Webhooks[et]
		if item == nil || item.Post == nil {
			t.Errorf("delivery of %q: no such webhook in the document", et)
			continue
		}
		for _, p := range item.Post.Parameters {
			v := r.Header.Get(p.Value.Name)
			if v == "" && p.Value.Required {
				t.Errorf("delivery of %s: header %s missing", et, p.Value.Name)
				continue
			}
			if err := p.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("delivery of %s: header %s %q breaks the document: %v", et, p.Value.Name, v, err)
			}
		}
		var body any
		if err := json.Unmarshal(rc.body[i], &body); err != nil {
			t.Fatalf("delivery of %s: %v", et, err)
		}
		schema := item.Post.RequestBody.Value.Content.Get("application/json").Schema.Value
		if err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("delivery of %s: the body breaks the document: %v\n%s", et, err, rc.body[i])
		}
		if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), secret, rc.body[i], time.Now(), time.Minute); err != nil {
			t.Errorf("delivery of %s: %v", et, err)
		}
	}
	for et := range doc.Webhooks {
		// source.closed and source.expiring need a shop's table in
		// PostgreSQL or MySQL; this server runs on SQLite. source's
		// TestSourceClosedWebhook and TestSourceReminderSent check a real
		// delivery of each against this document.
		if !rc.types[et] && et != string(hourglass.EventSourceClosed) && et != string(hourglass.EventSourceExpiring) {
			t.Errorf("webhook %s is documented; no delivery of it came", et)
		}
	}
}
