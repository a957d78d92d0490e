package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/sqlite"
	"github.com/hourglass/hourglass/webhook"
)

const secret = "whsec-0123456789abcdef"

// receiver is a real HTTP endpoint on 127.0.0.1 that records every request
// and answers what respond says (200 by default).
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	requests []request
	respond  func(r request, nth int) int // nth: requests for this event so far, from 1
	arrived  chan struct{}                // a token per request
}

type request struct {
	eventID, eventType, signature string
	deliveryID, attempt           string
	body                          []byte
	at                            time.Time
	status                        int
	sigErr                        error
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{t: t, arrived: make(chan struct{}, 10000)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := request{
			eventID:    r.Header.Get(webhook.EventIDHeader),
			eventType:  r.Header.Get(webhook.EventTypeHeader),
			signature:  r.Header.Get(webhook.SignatureHeader),
			deliveryID: r.Header.Get(webhook.DeliveryIDHeader),
			attempt:    r.Header.Get(webhook.AttemptHeader),
			body:       body,
			at:         time.Now(),
			status:     http.StatusOK,
		}
		req.sigErr = webhook.Verify(req.signature, secret, body, time.Now(), time.Minute)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			req.sigErr = fmt.Errorf("got %s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
		}
		rc.mu.Lock()
		nth := 1
		for _, p := range rc.requests {
			if p.eventID == req.eventID {
				nth++
			}
		}
		if rc.respond != nil {
			req.status = rc.respond(req, nth)
		}
		rc.requests = append(rc.requests, req)
		rc.mu.Unlock()
		w.WriteHeader(req.status)
		if req.status >= 300 {
			io.WriteString(w, "receiver says no")
		}
		rc.arrived <- struct{}{}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) setRespond(f func(r request, nth int) int) {
	rc.mu.Lock()
	rc.respond = f
	rc.mu.Unlock()
}

func (rc *receiver) all() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.requests)
}

// of returns the requests for one event, in arrival order.
func (rc *receiver) of(eventID string) []request {
	var out []request
	for _, r := range rc.all() {
		if r.eventID == eventID {
			out = append(out, r)
		}
	}
	return out
}

// delivered returns the event ids answered 2xx, in arrival order.
func (rc *receiver) delivered() []string {
	var out []string
	for _, r := range rc.all() {
		if r.status/100 == 2 {
			out = append(out, r.eventID)
		}
	}
	return out
}

// waitFor waits for requests until cond holds, failing after 20 s.
func (rc *receiver) waitFor(what string, cond func() bool) {
	rc.t.Helper()
	timeout := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-rc.arrived:
		case <-timeout:
			rc.t.Fatalf("%s: not after 20s; requests: %d", what, len(rc.all()))
		}
	}
}

// failFirst answers fail to the first n attempts of the first event the
// receiver sees, ok to everything else.
func failFirst(n, fail, ok int) func(request, int) int {
	var first string
	return func(r request, nth int) int {
		if first == "" {
			first = r.eventID
		}
		if r.eventID == first && nth <= n {
			return fail
		}
		return ok
	}
}

// counter is a webhook.Observer.
type counter struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{} // closed and replaced at each outcome
}

func (c *counter) WebhookAttempted(outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[outcome]++
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

// await waits until the outcomes counted satisfy ok, at most limit; it
// returns the last counts and whether ok held.
func (c *counter) await(limit time.Duration, ok func(map[string]int) bool) (map[string]int, bool) {
	giveUp := time.NewTimer(limit)
	defer giveUp.Stop()
	for {
		c.mu.Lock()
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		got, changed := maps(c.n), c.changed
		c.mu.Unlock()
		if ok(got) {
			return got, true
		}
		select {
		case <-changed:
		case <-giveUp.C:
			return got, false
		}
	}
}

func (c *counter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps(c.n)
}

func maps(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

type fixture struct {
	ctx   context.Context
	dir   string
	store hourglass.Database
	// wrap, when set, wraps the store the service is given (faults).
	wrap func(webhook.Store) webhook.Store
	svc  *webhook.Service
	obs  *counter
	stop func()
}

// setup opens a store in a temp dir with a product and starts a service on
// it with cfg (fast defaults: retries 30/60/90 ms, no jitter, 127.0.0.1
// allowed).
func setup(t *testing.T, cfg webhook.Config) *fixture {
	t.Helper()
	f := &fixture{ctx: context.Background(), dir: t.TempDir()}
	store, err := sqlite.Open(sqlite.Config{Dir: f.dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return setupOn(t, f, store, cfg)
}

// setupOn is setup over an open store (closed by the caller), with the
// service's store wrapped by f.wrap if set.
func setupOn(t *testing.T, f *fixture, store hourglass.Database, cfg webhook.Config) *fixture {
	t.Helper()
	f.store = store
	if _, err := store.PutProduct(f.ctx, hourglass.Product{SKU: "A", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	f.start(t, cfg)
	return f
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (f *fixture) start(t *testing.T, cfg webhook.Config) {
	t.Helper()
	if cfg.Allow.Len() == 0 {
		cfg.Allow, _ = webhook.ParseAllowList("127.0.0.1")
	}
	if cfg.Retry == nil {
		cfg.Retry = []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 90 * time.Millisecond}
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = -1
	}
	cfg.Timeout = cmpOr(cfg.Timeout, 5*time.Second)
	cfg.PollInterval = cmpOr(cfg.PollInterval, 50*time.Millisecond)
	cfg.Window = cmpOr(cfg.Window, 2*time.Second)
	cfg.LoadInterval = cmpOr(cfg.LoadInterval, 500*time.Millisecond)
	cfg.Logger = quietLogger()
	f.obs = &counter{}
	cfg.Observer = f.obs
	var store webhook.Store = f.store
	if f.wrap != nil {
		store = f.wrap(store)
	}
	svc, err := webhook.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	f.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(f.stop)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (f *fixture) subscribe(t *testing.T, rc *receiver, events ...hourglass.EventType) hourglass.Webhook {
	t.Helper()
	if len(events) == 0 {
		events = []hourglass.EventType{hourglass.EventTypeAll}
	}
	w, err := f.svc.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: rc.srv.URL + "/hook", Events: events, Secret: secret})
	if err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	return w
}

func (f *fixture) order(t *testing.T) hourglass.Order {
	t.Helper()
	o, _, err := f.store.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (f *fixture) eventIDs(t *testing.T, orderID int64) []string {
	t.Helper()
	evs, err := f.store.OrderEvents(f.ctx, orderID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	return ids
}

func (f *fixture) counts(t *testing.T) (pending, dead int) {
	t.Helper()
	p, d, err := f.svc.DeliveryCounts(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return p, d
}

// TestFailsThreeTimesThenDelivered: a receiver that fails the first three
// attempts gets the event on the fourth, after three retries spaced by the
// schedule, every attempt the same body with a valid signature; the success
// is recorded once and nothing is sent after it.
func TestFailsThreeTimesThenDelivered(t *testing.T) {
	t.Parallel()
	f := setup(t, webhook.Config{})
	rc := newReceiver(t)
	rc.setRespond(failFirst(3, http.StatusInternalServerError, http.StatusNoContent))
	w := f.subscribe(t, rc, hourglass.EventOrderCreated)
	o := f.order(t)
	ev := f.eventIDs(t, o.ID)[0]
	rc.waitFor("the fourth attempt", func() bool { return len(rc.of(ev)) >= 4 })

	// A later event, delivered, shows the engine went on; the first event
	// was not sent again meanwhile.
	later := f.eventIDs(t, f.order(t).ID)[0]
	rc.waitFor("a later event", func() bool { return len(rc.of(later)) >= 1 })
	reqs := rc.of(ev)
	if len(reqs) != 4 {
		t.Fatalf("%d attempts, want 4", len(reqs))
	}
	retry := []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 90 * time.Millisecond}
	for i, r := range reqs {
		if r.sigErr != nil {
			t.Errorf("attempt %d: %v", i+1, r.sigErr)
		}
		if r.attempt != strconv.Itoa(i+1) || r.eventType != "order.created" || string(r.body) != string(reqs[0].body) || r.deliveryID != reqs[0].deliveryID {
			t.Errorf("attempt %d: %+v", i+1, r)
		}
		if i > 0 && r.at.Sub(reqs[i-1].at) < retry[i-1] {
			t.Errorf("attempt %d came %v after the previous, before the %v backoff", i+1, r.at.Sub(reqs[i-1].at), retry[i-1])
		}
	}
	waitCounts(t, f, 0, 0) // the last success is recorded just after its answer
	if got := rc.delivered(); !slices.Equal(got, []string{ev, later}) {
		t.Errorf("delivered %v, want each event once: %v", got, []string{ev, later})
	}
	var body struct {
		ID, Type, CreatedAt string
		Order               json.RawMessage
	}
	if err := json.Unmarshal(reqs[0].body, &body); err != nil || body.ID != ev || body.Type != "order.created" || string(body.Order) != string(hourglass.MarshalOrder(o)) {
		t.Errorf("body %s (%v)", reqs[0].body, err)
	}
	// The observer is told just after the commit waitCounts saw.
	want := map[string]int{"retry": 3, "delivered": 2}
	if got, ok := f.obs.await(5*time.Second, func(got map[string]int) bool {
		return got["retry"] == want["retry"] && got["delivered"] == want["delivered"] && got["dead"] == 0
	}); !ok {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	if ws, _ := f.svc.Webhooks(f.ctx, hourglass.WebhookFilter{Limit: 10}); len(ws) != 1 || ws[0].ID != w.ID {
		t.Errorf("webhooks %+v", ws)
	}
	// The attempt log keeps all four, the delivered one included (its
	// delivery row is gone), each with what the receiver answered.
	log, err := f.store.DeliveryAttempts(f.ctx, o.ID, 0)
	if err != nil || len(log) != 4 {
		t.Fatalf("attempt log of order %d: %+v, %v; want 4 attempts", o.ID, log, err)
	}
	for i, a := range log {
		wantCode, wantOutcome := http.StatusInternalServerError, hourglass.AttemptRetry
		if i == 3 {
			wantCode, wantOutcome = http.StatusNoContent, hourglass.AttemptDelivered
		}
		sent := reqs[i].at
		if a.Attempt != i+1 || a.StatusCode != wantCode || a.Outcome != wantOutcome || a.EventID != ev || a.WebhookID != w.ID ||
			a.EventType != hourglass.EventOrderCreated || (wantOutcome == hourglass.AttemptRetry) != strings.HasPrefix(a.Error, "HTTP 500") ||
			a.At.IsZero() || a.At.After(sent.Add(time.Millisecond)) || sent.Sub(a.At) > time.Second || a.Duration < 0 {
			t.Errorf("logged attempt %d: %+v; want attempt %d, %d %s, sent at %v", i+1, a, i+1, wantCode, wantOutcome, sent)
		}
	}
}

// TestDeadLetterAndRetry: a receiver that always fails ends in the dead
// letters after the last attempt; once it is fixed, retrying the dead letter
// delivers it.
func TestDeadLetterAndRetry(t *testing.T) {
	t.Parallel()
	f := setup(t, webhook.Config{})
	rc := newReceiver(t)
	var fixed bool
	rc.setRespond(func(request, int) int {
		if fixed {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	w := f.subscribe(t, rc)
	o := f.order(t)
	ev := f.eventIDs(t, o.ID)[0]
	rc.waitFor("4 attempts", func() bool { return len(rc.of(ev)) >= 4 })
	var dls []hourglass.DeadLetter
	// The record commits just after the 4th answer.
	testenv.Eventually(t, 10*time.Second, "a dead letter", func() bool {
		var err error
		if dls, err = f.svc.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10}); err != nil {
			t.Fatal(err)
		}
		return len(dls) != 0
	})
	if len(dls) != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
	dl := dls[0]
	if dl.WebhookID != w.ID || dl.EventID != ev || dl.EventType != hourglass.EventOrderCreated || dl.OrderID != o.ID ||
		dl.Attempts != 4 || dl.LastError != "HTTP 503: receiver says no" || dl.FailedAt.IsZero() {
		t.Errorf("dead letter %+v", dl)
	}
	if n, err := f.svc.DeadLetterCount(f.ctx); n != 1 || err != nil {
		t.Errorf("DeadLetterCount = %d, %v", n, err)
	}
	// The observer is told just after the commit the dead letter's read saw.
	if got, ok := f.obs.await(5*time.Second, func(got map[string]int) bool { return got["retry"] == 3 && got["dead"] == 1 }); !ok {
		t.Errorf("outcomes %v", got)
	}

	rc.mu.Lock()
	fixed = true
	rc.mu.Unlock()
	if err := f.svc.RetryDeadLetter(f.ctx, dl.ID); err != nil {
		t.Fatal(err)
	}
	rc.waitFor("the retried delivery", func() bool { return len(rc.delivered()) == 1 })
	reqs := rc.of(ev)
	if last := reqs[len(reqs)-1]; last.attempt != "1" || last.sigErr != nil || last.deliveryID != strconv.FormatInt(dl.ID, 10) {
		t.Errorf("retried delivery %+v", last)
	}
	if err := f.svc.RetryDeadLetter(f.ctx, dl.ID); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Errorf("retry again: %v, want not_found", err)
	}
	waitCounts(t, f, 0, 0)
}

func waitCounts(t *testing.T, f *fixture, pending, dead int) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%d pending, %d dead", pending, dead), func() bool {
		p, d := f.counts(t)
		return p == pending && d == dead
	})
}

// TestInOrderPerOrder: a later event of an order is not sent while an
// earlier one is being retried; other orders' events are not held up.
func TestInOrderPerOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, webhook.Config{Retry: []time.Duration{200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}})
	rc := newReceiver(t)
	rc.setRespond(failFirst(2, http.StatusBadGateway, http.StatusOK)) // o1's created event
	f.subscribe(t, rc)
	o1 := f.order(t)
	rc.waitFor("the first attempt of order 1's created event", func() bool { return len(rc.all()) >= 1 })
	if _, err := f.store.PayOrder(f.ctx, o1.ID, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionOrder(f.ctx, o1.ID, hourglass.ActionShip); err != nil {
		t.Fatal(err)
	}
	o2 := f.order(t)
	if _, err := f.store.PayOrder(f.ctx, o2.ID, "p"); err != nil {
		t.Fatal(err)
	}
	e1, e2 := f.eventIDs(t, o1.ID), f.eventIDs(t, o2.ID)
	rc.waitFor("every event", func() bool { return len(rc.delivered()) == 5 })
	var got1, got2 []string
	for _, id := range rc.delivered() {
		switch {
		case slices.Contains(e1, id):
			got1 = append(got1, id)
		case slices.Contains(e2, id):
			got2 = append(got2, id)
		}
	}
	if !slices.Equal(got1, e1) || !slices.Equal(got2, e2) {
		t.Errorf("delivered order 1 %v (want %v), order 2 %v (want %v)", got1, e1, got2, e2)
	}
	// No event of o1 was even attempted before its created event succeeded.
	var createdOK time.Time
	for _, r := range rc.of(e1[0]) {
		if r.status == http.StatusOK {
			createdOK = r.at
		}
	}
	for _, id := range e1[1:] {
		for _, r := range rc.of(id) {
			if r.at.Before(createdOK) {
				t.Errorf("event %s of order 1 sent at %v, before its created event succeeded at %v", id, r.at, createdOK)
			}
		}
	}
	// o2 was not held up by o1's retries.
	if first := rc.of(e2[1])[0].at; !first.Before(createdOK) {
		t.Errorf("order 2's events waited for order 1's retries: sent at %v, o1 created delivered at %v", first, createdOK)
		for _, r := range rc.all() {
			t.Logf("%v %s %s attempt %s → %d", r.at.Format("05.000"), r.eventID, r.eventType, r.attempt, r.status)
		}
	}
}

// TestRestartLosesNothing: deliveries waiting for a retry when the service
// and store stop are sent after they are opened again.
func TestRestartLosesNothing(t *testing.T) {
	t.Parallel()
	cfg := webhook.Config{Retry: []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}}
	f := setup(t, cfg)
	rc := newReceiver(t)
	var up bool
	rc.setRespond(func(request, int) int {
		if up {
			return http.StatusOK
		}
		return http.StatusInternalServerError
	})
	f.subscribe(t, rc, hourglass.EventOrderCreated, hourglass.EventOrderPaid)
	var want []string
	for range 5 {
		o := f.order(t)
		if _, err := f.store.PayOrder(f.ctx, o.ID, "p"); err != nil {
			t.Fatal(err)
		}
		want = append(want, f.eventIDs(t, o.ID)...)
	}
	rc.waitFor("a first attempt of each order's first event", func() bool { return len(rc.all()) >= 5 })
	f.stop()
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	up = true
	rc.mu.Unlock()

	store, err := sqlite.Open(sqlite.Config{Dir: f.dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f.store = store
	f.start(t, cfg)
	rc.waitFor("every event", func() bool {
		got := rc.delivered()
		for _, id := range want {
			if !slices.Contains(got, id) {
				return false
			}
		}
		return true
	})
	waitCounts(t, f, 0, 0)
}

// TestFailures: every kind of failure is retried and recorded with a
// message saying what happened.
func TestFailures(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // then the server notices the client hanging up
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}, "no response within 200ms"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		}, "HTTP 302"},
		{"4xx", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
		}, "HTTP 401: bad signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, webhook.Config{Timeout: 200 * time.Millisecond, Retry: []time.Duration{time.Millisecond}})
			srv := httptest.NewServer(tt.handler)
			t.Cleanup(srv.Close)
			if _, err := f.svc.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: srv.URL, Events: []hourglass.EventType{"*"}, Secret: secret}); err != nil {
				t.Fatal(err)
			}
			f.order(t)
			waitCounts(t, f, 0, 1)
			dls, _ := f.svc.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 1})
			if len(dls) != 1 || dls[0].Attempts != 2 || !strings.Contains(dls[0].LastError, tt.want) {
				t.Errorf("dead letters %+v, want 2 attempts and an error with %q", dls, tt.want)
			}
		})
	}
}

// TestCreateWebhookChecksTheAllowList: the host of a webhook must be listed;
// loopback only when listed.
func TestCreateWebhookChecksTheAllowList(t *testing.T) {
	t.Parallel()
	allow, err := webhook.ParseAllowList("hooks.example.com, 127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	f := setup(t, webhook.Config{Allow: allow})
	tests := []struct {
		url  string
		want string // "" allowed
	}{
		{"https://hooks.example.com/x", ""},
		{"http://127.0.0.1:9000/x", ""},
		{"http://127.0.0.1:9001/x", "host 127.0.0.1:9001 is not in the webhook allow-list"},
		{"http://localhost:9000/x", "host localhost:9000 is not in the webhook allow-list"},
		{"https://internal.example.com/x", "host internal.example.com:443"},
		{"http://169.254.169.254/", "allowed only when listed"},
	}
	for _, tt := range tests {
		_, err := f.svc.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: tt.url, Events: []hourglass.EventType{"*"}, Secret: secret})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.url, err)
		case tt.want != "" && (hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want invalid_argument with %q", tt.url, err, tt.want)
		}
	}
	if ws, _ := f.svc.Webhooks(f.ctx, hourglass.WebhookFilter{Limit: 10}); len(ws) != 2 {
		t.Errorf("%d webhooks stored, want the 2 allowed", len(ws))
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  webhook.Config
		ok   bool
	}{
		{"zero", webhook.Config{}, true},
		{"retry too short", webhook.Config{Retry: []time.Duration{0}}, false},
		{"too many retries", webhook.Config{Retry: make([]time.Duration, 21)}, false},
		{"jitter above 1", webhook.Config{Jitter: 1.5}, false},
		{"load interval not below window", webhook.Config{Window: time.Second, LoadInterval: time.Second}, false},
		{"negative workers", webhook.Config{Workers: -1}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// TestOwnedPartitionsOnly: a service with an Ownership sends only the
// deliveries of orders in its partitions, and a partition it gains has its
// pending deliveries loaded and sent.
func TestOwnedPartitionsOnly(t *testing.T) {
	t.Parallel()
	own := hourglasstest.NewOwnership()
	cs := &scanCountingStore{}
	f := &fixture{ctx: context.Background(), dir: t.TempDir(), wrap: func(s webhook.Store) webhook.Store { cs.Store = s; return cs }}
	f = setupOn(t, f, openStore(t, "sqlite"), webhook.Config{Ownership: own})
	rc := newReceiver(t)
	f.subscribe(t, rc, hourglass.EventOrderCreated)
	mine, other := f.order(t), f.order(t)
	own.Move([]int{hourglass.PartitionOf(mine.ID)}, nil)
	rc.waitFor("the created event of the owned partition's order", func() bool { return len(rc.all()) > 0 })
	// Several polls (PollInterval 50 ms): the other order's event must not follow.
	scans := cs.scans.Load()
	testenv.Eventually(t, 10*time.Second, "six more reads of due deliveries", func() bool { return cs.scans.Load() >= scans+6 })
	if got, want := rc.delivered(), f.eventIDs(t, mine.ID); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want only the owned order's events %v", got, want)
	}
	own.Move([]int{hourglass.PartitionOf(other.ID)}, nil)
	rc.waitFor("the gained partition's delivery", func() bool { return len(rc.delivered()) == 2 })
}

// TestYield: while Config.Yield says so, no attempt starts (up to
// YieldMax each); once it stops, the delivery goes out.
func TestYield(t *testing.T) {
	t.Parallel()
	var yielding atomic.Bool
	var asked atomic.Int64
	yielding.Store(true)
	f := setup(t, webhook.Config{Yield: func() bool { asked.Add(1); return yielding.Load() }})
	rc := newReceiver(t)
	f.subscribe(t, rc, hourglass.EventOrderCreated)
	ev := f.eventIDs(t, f.order(t).ID)[0]
	// The attempt is at the gate, asked again and again (every 5 ms, well
	// under the bound of YieldMax): without the gate it would be out by now.
	testenv.Eventually(t, 10*time.Second, "the attempt waiting on Yield", func() bool { return asked.Load() >= 10 })
	if got := rc.of(ev); len(got) != 0 {
		t.Fatalf("%d attempts while yielding, want none", len(got))
	}
	yielding.Store(false)
	rc.waitFor("the delivery after yielding", func() bool { return len(rc.of(ev)) == 1 })
}

// scanCountingStore counts the service's reads of due deliveries (its
// polls and window loads), so a test can wait for several to have passed.
type scanCountingStore struct {
	webhook.Store
	scans atomic.Int64
}

func (s *scanCountingStore) DueDeliveries(ctx context.Context, p hourglass.DueDeliveriesParams) ([]hourglass.DeliveryTimer, error) {
	s.scans.Add(1)
	return s.Store.DueDeliveries(ctx, p)
}
