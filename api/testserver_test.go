package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/node/nodetest"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/storetest"
	"github.com/hourglass/hourglass/webhook"
)

// testServer is an in-process hourglass started through node.New
// (nodetest), as cmd/hourglass starts one: a new database of the store
// the test runs on (testenv.Store: SQLite unless its case or
// HOURGLASS_TEST_STORE names another), the engine running with
// a short sweep, and the API served over real HTTP on 127.0.0.1.
// Everything stops in t.Cleanup.
type testServer struct {
	URL    string
	Token  string
	Client *api.Client // sends Token
	HTTP   *http.Client
	// Handler is the node's API handler (api.BodyBytesHeld reads it).
	Handler http.Handler
	logs    *syncBuffer
}

type serverConfig struct {
	// Token, when set, is required on every /v1 route.
	Token string
	// AllowedHosts is api.Config's.
	AllowedHosts []string
	// Observer, when set, records the API's requests.
	Observer api.Observer
	// MaxBodyMemory is api.Config's (0: its default).
	MaxBodyMemory int64
	// Dir is the data directory (default a new temporary one).
	Dir string
	// DatabaseURL, when set, is the database (default: a new one of the
	// store HOURGLASS_TEST_STORE names, storetest.URL).
	DatabaseURL string
	// WebhookAllow, when set, serves and delivers webhooks to these hosts
	// (webhook.ParseAllowList), with retries after 200ms and 1s, no jitter.
	WebhookAllow string
}

// startServer starts a server and waits until /readyz answers 200. On test
// failure the server's log is written to the test log. A test that states
// no tier is in the Default tier (testenv.RequireDefault).
// onEveryMechanism runs an end-to-end test on every delay mechanism and
// every store (testenv.EveryCase): on the developer's case in the Default
// tier, on the others in the Matrix tier.
func onEveryMechanism(t *testing.T, test func(t *testing.T)) {
	testenv.EveryCase(t, testenv.Default, storeKinds, delay.Names(), test)
}

// onEveryStore is onEveryMechanism for a test whose subject is the store,
// on the wheel.
func onEveryStore(t *testing.T, test func(t *testing.T)) {
	testenv.EveryCase(t, testenv.Default, storeKinds, nil, test)
}

// storeKinds are the stores, the default first.
var storeKinds = []string{store.KindSQLite, store.KindPostgres, store.KindMySQL}

func startServer(t *testing.T, cfg serverConfig) *testServer {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clock := hourglass.SystemClock{}
	// The delay mechanism (default: the wheel) is the test's case
	// (onEveryMechanism) or HOURGLASS_TEST_DELAY's; its service is found
	// like every integration test finds it (hourglasstest.ServiceURL).
	testenv.RequireDefault(t)
	mechanism := testenv.Delay(t, "wheel")
	// No test clock: the store decides deadlines with the database's own
	// clock, as in production. cfg.Dir puts a SQLite store in that
	// directory instead.
	url := "sqlite://" + filepath.Join(cfg.Dir, "hourglass.db")
	switch {
	case cfg.DatabaseURL != "":
		url = cfg.DatabaseURL
	case cfg.Dir == "":
		url = storetest.URL(t)
	}
	var hooks webhook.Config
	if cfg.WebhookAllow != "" {
		allow, err := webhook.ParseAllowList(cfg.WebhookAllow)
		if err != nil {
			t.Fatal(err)
		}
		hooks = webhook.Config{Allow: allow, Retry: []time.Duration{200 * time.Millisecond, time.Second}, Jitter: -1,
			Timeout: 5 * time.Second, PollInterval: 50 * time.Millisecond, Window: 2 * time.Second, LoadInterval: 500 * time.Millisecond}
	}
	n := nodetest.Start(t, node.Config{
		Store: store.Options{URL: url},
		Delay: mechanism,
		// The mechanism with this test's namespace and services (its
		// broker objects destroyed at the end).
		DelayFeed:     delay.FeedOf(mechanism),
		OpenDelay:     nodetest.Mechanism(t, mechanism, func(db hourglass.Store) delay.Options { return delayOptions(t, mechanism, db, logger) }),
		Engine:        engine.Config{SweepInterval: 200 * time.Millisecond, SweepGrace: 500 * time.Millisecond},
		Webhooks:      hooks,
		Tokens:        tokens(cfg.Token),
		AllowedHosts:  cfg.AllowedHosts,
		APIObserver:   cfg.Observer,
		MaxBodyMemory: cfg.MaxBodyMemory,
		Clock:         clock,
		Logger:        logger,
	})

	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = 1024
	transport.MaxIdleConnsPerHost = 1024
	hc := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})

	url = nodetest.URL(n)
	s := &testServer{URL: url, Token: cfg.Token, Client: api.NewClient(url, cfg.Token, hc), HTTP: hc, Handler: n.Handler, logs: logs}
	testenv.Eventually(t, 10*time.Second, "/readyz 200", func() bool {
		status, _, _ := s.call(t, http.MethodGet, "/readyz", nil, nil)
		return status == http.StatusOK
	})
	return s
}

// tokens is the list of one token, or none for "".
func tokens(token string) []string {
	if token == "" {
		return nil
	}
	return []string{token}
}

// delayOptions finds the service a mechanism needs, skipping the test when
// it is absent (failing under CI=true), and gives it a namespace of its own.
func delayOptions(t *testing.T, mechanism string, store hourglass.Store, logger *slog.Logger) delay.Options {
	t.Helper()
	o := delay.Options{Store: store, Logger: logger, Namespace: hourglasstest.Namespace(t), PollInterval: 100 * time.Millisecond}
	switch mechanism {
	case "redis", "rediskeyspace":
		o.RedisURL = hourglasstest.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", delay.RedisURLDefault)
	case "rabbitmq":
		o.RabbitMQURL = hourglasstest.ServiceURL(t, "RabbitMQ", "HOURGLASS_TEST_RABBITMQ_URL", delay.RabbitMQURLDefault)
	case "nats":
		o.NATSURL = hourglasstest.ServiceURL(t, "NATS", "HOURGLASS_TEST_NATS_URL", delay.NATSURLDefault)
	case "kafka":
		o.KafkaURL = hourglasstest.ServiceURL(t, "Kafka", "HOURGLASS_TEST_KAFKA_URL", delay.KafkaURLDefault)
	}
	return o
}

// call sends a request with a raw body (nil for none) and returns the status,
// the response headers and the raw response body. The server's token is sent
// unless header has an "Authorization" entry (a nil one sends none).
func (s *testServer) call(t *testing.T, method, path string, header http.Header, body []byte) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if _, set := header["Authorization"]; !set && s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	// Every answer is sent with its length, never chunked, whether
	// writeJSON or net/http counted it.
	if len(resp.TransferEncoding) > 0 || (method != http.MethodHead && resp.ContentLength != int64(len(raw))) {
		t.Errorf("%s %s: Content-Length %d, Transfer-Encoding %q for an answer of %d bytes, want its length", method, path, resp.ContentLength, resp.TransferEncoding, len(raw))
	}
	return resp.StatusCode, resp.Header, raw
}

// checkError asserts an error answer: the status, and a body of exactly
// {"error":{"code":...,"message":...}} with the code and a non-empty message.
func checkError(t *testing.T, what string, status int, raw []byte, wantStatus int, wantCode string) {
	t.Helper()
	if status >= 500 {
		t.Errorf("%s: status %d (a 5xx), body %s", what, status, raw)
	}
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d; body %s", what, status, wantStatus, raw)
	}
	var body struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		t.Errorf("%s: error body %s is not {\"error\":{\"code\",\"message\"}}: %v", what, raw, err)
		return
	}
	if body.Error == nil || body.Error.Code == nil || body.Error.Message == nil {
		t.Errorf("%s: error body %s lacks error.code or error.message", what, raw)
		return
	}
	if *body.Error.Code != wantCode {
		t.Errorf("%s: error code %q, want %q (message %q)", what, *body.Error.Code, wantCode, *body.Error.Message)
	}
	if strings.TrimSpace(*body.Error.Message) == "" {
		t.Errorf("%s: empty error message in %s", what, raw)
	}
}

// checkAPIError asserts that err is an *api.Error with the status and code.
func checkAPIError(t *testing.T, what string, err error, wantStatus int, wantCode string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Errorf("%s: got error %v, want an api error %d %s", what, err, wantStatus, wantCode)
		return
	}
	if e.Status != wantStatus || e.Code != wantCode || e.Message == "" {
		t.Errorf("%s: got %d %q (message %q), want %d %q with a message", what, e.Status, e.Code, e.Message, wantStatus, wantCode)
	}
}

// apiTime is the API's time format: RFC 3339, UTC, exactly 3 fractional digits.
var apiTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// orderFields are the fields of an order's JSON, all always present.
var orderFields = []string{"id", "user_id", "status", "items", "created_at", "deadline", "paid_at", "closed_at", "close_reason", "payment_id"}

// checkOrderJSON checks the raw JSON of an order — exactly the documented
// fields, times in the API format, optional fields null or non-empty — and
// returns it decoded, with its raw fields for null checks.
func checkOrderJSON(t *testing.T, raw []byte) (api.OrderJSON, map[string]json.RawMessage) {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatalf("order JSON %s: %v", raw, err)
	}
	var keys []string
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := slices.Sorted(slices.Values(orderFields))
	if !slices.Equal(keys, want) {
		t.Errorf("order JSON has fields %v, want %v", keys, want)
	}
	for _, f := range []string{"created_at", "deadline", "paid_at", "closed_at"} {
		v := fields[f]
		if string(v) == "null" && (f == "paid_at" || f == "closed_at") {
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil || !apiTime.MatchString(s) {
			t.Errorf("order JSON %s = %s, want a time like 2006-01-02T15:04:05.000Z", f, v)
		}
	}
	for _, f := range []string{"close_reason", "payment_id"} {
		if string(fields[f]) == `""` {
			t.Errorf("order JSON %s is an empty string, want null or a value", f)
		}
	}
	var o api.OrderJSON
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("order JSON %s: %v", raw, err)
	}
	return o, fields
}

// checkNull asserts which optional order fields are JSON null.
func checkNull(t *testing.T, what string, fields map[string]json.RawMessage, null ...string) {
	t.Helper()
	for _, f := range []string{"paid_at", "closed_at", "close_reason", "payment_id"} {
		isNull := string(fields[f]) == "null"
		if want := slices.Contains(null, f); isNull != want {
			t.Errorf("%s: %s = %s, want null: %v", what, f, fields[f], want)
		}
	}
}

// apiTimeOf parses an API time.
func apiTimeOf(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("parse time %q: %v", s, err)
	}
	return tm
}

func (s *testServer) putProduct(t *testing.T, sku, category string, available int64) {
	t.Helper()
	p, err := s.Client.PutProduct(t.Context(), sku, "product "+sku, category, available)
	if err != nil {
		t.Fatalf("put product %s: %v", sku, err)
	}
	if p.Available != available || p.Category != category {
		t.Fatalf("put product %s: got %+v", sku, p)
	}
}

type stock struct{ Available, Reserved, Sold int64 }

func (s *testServer) stock(t *testing.T, sku string) stock {
	t.Helper()
	p, err := s.Client.Product(t.Context(), sku)
	if err != nil {
		t.Fatalf("get product %s: %v", sku, err)
	}
	return stock{p.Available, p.Reserved, p.Sold}
}

func (s *testServer) wantStock(t *testing.T, what, sku string, want stock) {
	t.Helper()
	if got := s.stock(t, sku); got != want {
		t.Errorf("%s: stock of %s = %+v, want %+v", what, sku, got, want)
	}
}

// createOrder posts a raw order body and checks it was created.
func (s *testServer) createOrder(t *testing.T, body string) api.OrderJSON {
	t.Helper()
	status, _, raw := s.call(t, http.MethodPost, "/v1/orders", nil, []byte(body))
	if status != http.StatusCreated {
		t.Fatalf("create order %s: status %d, body %s", body, status, raw)
	}
	o, _ := checkOrderJSON(t, raw)
	return o
}

func (s *testServer) order(t *testing.T, id int64) api.OrderJSON {
	t.Helper()
	status, _, raw := s.call(t, http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), nil, nil)
	if status != http.StatusOK {
		t.Fatalf("get order %d: status %d, body %s", id, status, raw)
	}
	o, _ := checkOrderJSON(t, raw)
	return o
}

// allOrders pages through GET /v1/orders with the status filter.
func (s *testServer) allOrders(t *testing.T, status string, limit int) []api.OrderJSON {
	t.Helper()
	var out []api.OrderJSON
	var after int64
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatalf("list orders: more than 100000 pages; is next ever null?")
		}
		l, err := s.Client.ListOrders(t.Context(), status, limit, after)
		if err != nil {
			t.Fatalf("list orders status=%q after=%d: %v", status, after, err)
		}
		out = append(out, l.Orders...)
		if l.Next == nil {
			return out
		}
		after = *l.Next
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
