package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/storetest"
	"github.com/hourglass/hourglass/webhook"
)

const checkSecret = "a-check-secret-0123456789"

// checkReceiver is the shop's payment check endpoint: it answers by the
// order's user_id, verifies each request's signature and counts the
// checks of each order.
type checkReceiver struct {
	t       *testing.T
	mu      sync.Mutex
	checks  map[int64]int
	answers func(o orderSeen, n int) (status int, body string, hang bool)
}

type orderSeen struct {
	ID       int64  `json:"id"`
	UserID   string `json:"user_id"`
	Status   string `json:"status"`
	Deadline string `json:"deadline"`
}

func (rc *checkReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), checkSecret, body, time.Now(), time.Minute); err != nil {
		rc.t.Errorf("check %s: signature: %v", body, err)
	}
	var req struct {
		Order *orderSeen `json:"order"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Order == nil {
		rc.t.Errorf("check body %s is not {\"order\":{…}}: %v", body, err)
		w.WriteHeader(400)
		return
	}
	if req.Order.Status != string(hourglass.StatePendingPayment) {
		rc.t.Errorf("check of order %d in status %s", req.Order.ID, req.Order.Status)
	}
	rc.mu.Lock()
	rc.checks[req.Order.ID]++
	n := rc.checks[req.Order.ID]
	rc.mu.Unlock()
	status, answer, hang := rc.answers(*req.Order, n)
	if hang {
		<-r.Context().Done() // no answer: the check times out
		return
	}
	w.WriteHeader(status)
	io.WriteString(w, answer)
}

func (rc *checkReceiver) count(id int64) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.checks[id]
}

// startCheckedNode runs a node on the store HOURGLASS_TEST_STORE names
// (SQLite by default) whose closes are checked at rc, sweeping every
// 100 ms with 100 ms of grace, and puts product A (10 units).
func startCheckedNode(t *testing.T, bc BeforeClose, rc *checkReceiver) *Node {
	t.Helper()
	return startCheckedNodeLog(t, bc, rc, slog.New(slog.DiscardHandler))
}

// startCheckedNodeLog is startCheckedNode logging to log.
func startCheckedNodeLog(t *testing.T, bc BeforeClose, rc *checkReceiver, log *slog.Logger) *Node {
	t.Helper()
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	bc.URL, bc.Secret = srv.URL, checkSecret
	n, err := New(context.Background(), Config{
		Addr:        "127.0.0.1:0",
		Store:       store.Options{URL: storetest.URL(t)},
		Engine:      engine.Config{SweepInterval: 100 * time.Millisecond, SweepGrace: 100 * time.Millisecond},
		BeforeClose: bc,
		TimerMax:    1000,
		Logger:      log,
	})
	if err != nil {
		t.Fatal(err)
	}
	RunInTest(t, n)
	ctx := context.Background()
	if _, err := n.Store.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	return n
}

func createFor(t *testing.T, n *Node, user string) hourglass.Order {
	t.Helper()
	o, _, err := n.Store.CreateOrder(context.Background(), hourglass.CreateOrderParams{UserID: user, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// await polls the order until ok or 10 s passed (real time: the node runs
// on the database's clock).
func await(t *testing.T, n *Node, id int64, what string, ok func(hourglass.Order) bool) hourglass.Order {
	t.Helper()
	var o hourglass.Order
	waited := false
	defer func() {
		if !waited { // Eventually failed the test: say what the order is
			t.Logf("order %d is %+v", id, o)
		}
	}()
	testenv.EventuallyEvery(t, 10*time.Second, 20*time.Millisecond, fmt.Sprintf("order %d: %s", id, what), func() bool {
		var err error
		if o, err = n.Store.Order(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return ok(o)
	})
	waited = true
	return o
}

func eventTypes(t *testing.T, n *Node, id int64) []hourglass.EventType {
	t.Helper()
	evs, err := n.Store.OrderEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []hourglass.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// TestBeforeCloseAnswers: a node with --before-close-url asks before each
// close and does what the answer says: close closes; paid marks the
// hourglass order paid (reserved → sold, once, order.paid, never closed);
// extend arms it again for the new deadline (order.extended) and it is
// checked and closed then; a malformed answer and a receiver that times
// out, and an extension the store refuses (more than 7 days after
// creation), leave the order pending past its deadline and the sweeper's grace,
// checked again and again, with the before_close_failures rule watching.
func TestBeforeCloseAnswers(t *testing.T) {
	t.Parallel()
	extendTo := map[int64]string{}
	var mu sync.Mutex
	rc := &checkReceiver{t: t, checks: map[int64]int{}, answers: func(o orderSeen, n int) (int, string, bool) {
		switch o.UserID {
		case "close":
			return 200, `{"action":"close"}`, false
		case "paid":
			return 200, fmt.Sprintf(`{"action":"paid","payment_id":"pay-%d"}`, o.ID), false
		case "extend":
			if n > 1 {
				return 200, `{"action":"close"}`, false
			}
			d, _ := time.Parse(time.RFC3339Nano, o.Deadline)
			to := d.Add(time.Second).Format(hourglass.TimeFormat)
			mu.Lock()
			extendTo[o.ID] = to
			mu.Unlock()
			return 200, fmt.Sprintf(`{"action":"extend","deadline":%q}`, to), false
		case "malformed":
			return 200, `{"action":"clos`, false
		case "toofar": // an extension the store refuses: more than 7 days after creation
			return 200, `{"action":"extend","deadline":"2099-01-01T00:00:00.000Z"}`, false
		case "timeout":
			return 0, "", true
		}
		return 500, "unknown user", false
	}}
	n := startCheckedNode(t, BeforeClose{Timeout: 300 * time.Millisecond}, rc)
	closeO, paidO, extendO := createFor(t, n, "close"), createFor(t, n, "paid"), createFor(t, n, "extend")
	malformed, hung, tooFar := createFor(t, n, "malformed"), createFor(t, n, "timeout"), createFor(t, n, "toofar")

	closed := await(t, n, closeO.ID, "closed", func(o hourglass.Order) bool { return o.Status == hourglass.StateClosed })
	if closed.ClosedAt.Before(closeO.Deadline) {
		t.Errorf("closed at %v, before its deadline %v", closed.ClosedAt, closeO.Deadline)
	}
	paid := await(t, n, paidO.ID, "paid", func(o hourglass.Order) bool { return o.Status != hourglass.StatePendingPayment })
	if paid.Status != hourglass.StatePaid || paid.PaymentID != fmt.Sprintf("pay-%d", paidO.ID) || paid.PaidAt.Before(paidO.Deadline) {
		t.Fatalf("the order answered paid is %+v; want paid with its payment_id, paid_at the check's time", paid)
	}
	if got := eventTypes(t, n, paidO.ID); !slices.Equal(got, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid}) {
		t.Fatalf("events of the paid order %v; want created, paid", got)
	}
	ext := await(t, n, extendO.ID, "closed after its extension", func(o hourglass.Order) bool { return o.Status == hourglass.StateClosed })
	mu.Lock()
	want := extendTo[extendO.ID]
	mu.Unlock()
	if ext.Deadline.Format(hourglass.TimeFormat) != want || ext.ClosedAt.Before(ext.Deadline) {
		t.Fatalf("the extended order is %+v; want closed at or after its new deadline %s", ext, want)
	}
	if got := eventTypes(t, n, extendO.ID); !slices.Equal(got, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderExtended, hourglass.EventOrderClosed}) {
		t.Fatalf("events of the extended order %v; want created, extended, closed", got)
	}
	if c := rc.count(extendO.ID); c != 2 {
		t.Errorf("the extended order was checked %d times, want 2 (at each deadline)", c)
	}

	// The failing checks: pending past the deadline and the sweeper's
	// grace, checked again with backoff.
	for _, o := range []hourglass.Order{malformed, hung, tooFar} {
		await(t, n, o.ID, "checked three times", func(hourglass.Order) bool { return rc.count(o.ID) >= 3 })
		cur, err := n.Store.Order(context.Background(), o.ID)
		if err != nil || cur.Status != hourglass.StatePendingPayment {
			t.Fatalf("order %s %d after 3 failed checks: %+v, %v; want pending", o.UserID, o.ID, cur, err)
		}
		if late := time.Since(o.Deadline); late < 200*time.Millisecond {
			t.Errorf("order %d only %v past its deadline", o.ID, late)
		}
	}
	if since, ok := n.gate.Checker().FailingSince(); !ok || since.Before(malformed.Deadline.Add(-time.Second)) {
		t.Fatalf("FailingSince = %v, %v; want the failures since the deadlines", since, ok)
	}
	if !slices.Contains(n.alerts.evaluator.Rules(), alert.RuleBeforeCloseFailures) {
		t.Fatalf("rules %v lack %s", n.alerts.evaluator.Rules(), alert.RuleBeforeCloseFailures)
	}
	p, err := n.Store.Product(context.Background(), "A")
	if err != nil || p.Available != 10-1-3 || p.Reserved != 3 || p.Sold != 1 {
		t.Fatalf("stock %+v, %v; want 1 sold, 3 reserved by the pending orders, the rest available", p, err)
	}
	if got := eventTypes(t, n, tooFar.ID); !slices.Equal(got, []hourglass.EventType{hourglass.EventOrderCreated}) {
		t.Fatalf("events of the order whose extension was refused %v; want created only", got)
	}
	metrics := scrape(t, n)
	for _, line := range []string{`hourglass_before_close_calls_total{answer="close"} 2`, `hourglass_before_close_calls_total{answer="paid"} 1`} {
		if !strings.Contains(metrics, line) {
			t.Errorf("metrics lack %s", line)
		}
	}
	if !strings.Contains(metrics, `hourglass_before_close_seconds_count`) || strings.Contains(metrics, `hourglass_before_close_calls_total{answer="error"} 0`) ||
		strings.Contains(metrics, `hourglass_before_close_calls_total{answer="extend"} 0`) || strings.Contains(metrics, `hourglass_before_close_calls_total{answer="extend"} 1\n`) {
		t.Errorf("metrics lack the latency histogram or the errors:\n%s", grep(metrics, "before_close"))
	}
}

// TestBeforeCloseOnErrorClose: with --before-close-on-error close, an
// order whose check failed --before-close-max-failures times in a row is
// closed anyway, its stock released.
func TestBeforeCloseOnErrorClose(t *testing.T) {
	t.Parallel()
	rc := &checkReceiver{t: t, checks: map[int64]int{}, answers: func(orderSeen, int) (int, string, bool) {
		return 503, "down", false
	}}
	n := startCheckedNode(t, BeforeClose{OnError: beforeclose.OnErrorClose, MaxFailures: 3}, rc)
	o := createFor(t, n, "u")
	await(t, n, o.ID, "closed after 3 failed checks", func(o hourglass.Order) bool { return o.Status == hourglass.StateClosed })
	if c := rc.count(o.ID); c != 3 {
		t.Fatalf("checked %d times, want 3", c)
	}
	if _, ok := n.gate.Checker().FailingSince(); ok {
		t.Fatal("the closed order's failures are still counted")
	}
	if p, err := n.Store.Product(context.Background(), "A"); err != nil || p.Available != 10 || p.Reserved != 0 {
		t.Fatalf("stock %+v, %v; want released", p, err)
	}
}

func scrape(t *testing.T, n *Node) string {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

func grep(text, word string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestBeforeCloseConcurrent: a burst of due orders is checked 32 at once
// (beforeclose.ConcurrencyDefault), not one after another behind slow
// answers: the receiver holds every check until 32 are in flight, none
// more arrive while they are, and once it answers every order closes.
func TestBeforeCloseConcurrent(t *testing.T) {
	t.Parallel()
	var (
		mu             sync.Mutex
		inFlight, most int
		full           = make(chan struct{})
		release        = make(chan struct{})
	)
	rc := &checkReceiver{t: t, checks: map[int64]int{}, answers: func(orderSeen, int) (int, string, bool) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == beforeclose.ConcurrencyDefault {
			close(full)
		}
		mu.Unlock()
		<-release // a slow provider
		mu.Lock()
		inFlight--
		mu.Unlock()
		return 200, `{"action":"close"}`, false
	}}
	n := startCheckedNode(t, BeforeClose{Timeout: time.Minute}, rc)
	if _, err := n.Store.PutProduct(context.Background(), hourglass.Product{SKU: "A", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	var orders []hourglass.Order
	for range 100 {
		orders = append(orders, createFor(t, n, "u"))
	}
	select {
	case <-full:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatalf("never %d checks in flight at once", beforeclose.ConcurrencyDefault)
	}
	time.Sleep(300 * time.Millisecond) // room for a 33rd check to arrive, if one could
	mu.Lock()
	if most != beforeclose.ConcurrencyDefault {
		t.Errorf("%d checks in flight at most, want %d", most, beforeclose.ConcurrencyDefault)
	}
	mu.Unlock()
	close(release)
	for _, o := range orders {
		await(t, n, o.ID, "closed", func(o hourglass.Order) bool { return o.Status == hourglass.StateClosed })
	}
}

// TestBeforeCloseTimeoutFakeClock: on the fake clock (store, engine,
// checks and retries alike), a receiver that never answers leaves the
// order pending past its deadline and the sweeper's grace, its check timed
// out every 2 s and tried again, and once the failures have gone on for
// more than a minute the before_close_failures alert fires.
func TestBeforeCloseTimeoutFakeClock(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	arrived := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // then the server notices the client hang up
		select {
		case arrived <- struct{}{}:
		default: // the test stopped counting: never block the server's Close
		}
		<-r.Context().Done() // never answers
	}))
	t.Cleanup(srv.Close)
	n, err := New(context.Background(), Config{
		Addr:        "127.0.0.1:0",
		Store:       store.Options{DataDir: t.TempDir(), Clock: clock},
		Engine:      engine.Config{SweepInterval: 100 * time.Millisecond, SweepGrace: 100 * time.Millisecond},
		BeforeClose: BeforeClose{URL: srv.URL},
		TimerMax:    1000,
		Clock:       clock,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	RunInTest(t, n)
	ctx := context.Background()
	if _, err := n.Store.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	o := createFor(t, n, "u")
	// Move the clock in 100 ms steps until a check arrives (the timers
	// that lead to it may be armed a moment after a step), then past its
	// 2 s timeout; again until a minute and more of failures.
	checks := 0
	giveUp := time.After(60 * time.Second)
	for clock.Now().Sub(o.Deadline) <= alert.BeforeCloseFailuresAfter+beforeclose.RetryMax {
		select {
		case <-arrived:
			checks++
			clock.Advance(beforeclose.TimeoutDefault)
		case <-time.After(5 * time.Millisecond):
			clock.Advance(100 * time.Millisecond)
		case <-giveUp:
			t.Fatalf("%d checks in 60 s of real time; the clock at %v", checks, clock.Now())
		}
	}
	cur, err := n.Store.Order(ctx, o.ID)
	if err != nil || cur.Status != hourglass.StatePendingPayment {
		t.Fatalf("order %d %v past its deadline: %+v, %v; want pending", o.ID, clock.Now().Sub(o.Deadline), cur, err)
	}
	if checks < 10 {
		t.Fatalf("%d checks in %v of failures; want one every 2 s + at most 5 s", checks, clock.Now().Sub(o.Deadline))
	}
	t.Logf("%d checks in %v of failures", checks, clock.Now().Sub(o.Deadline))
	n.alerts.evaluator.Evaluate(ctx)
	for _, st := range n.alerts.evaluator.Status() {
		if st.Rule == alert.RuleBeforeCloseFailures && !st.Firing {
			t.Fatalf("%s not firing after %v of failed checks: %+v", alert.RuleBeforeCloseFailures, clock.Now().Sub(o.Deadline), st)
		}
	}
}

// lockedBuffer is a log's text, written from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBeforeCloseExtendNotAhead: a check answering extend to a deadline
// in the past is a failed check (extend_invalid), retried with backoff:
// a handful of calls in 3 s, not thousands (9,376 in 9 s before); one
// extending each time to a moment from now is asked at most once per
// step (100 ms doubling). Both orders stay pending. A paid answer logs
// that the order was paid, not that marking it paid failed.
func TestBeforeCloseExtendNotAhead(t *testing.T) {
	t.Parallel()
	rc := &checkReceiver{t: t, checks: map[int64]int{}, answers: func(o orderSeen, n int) (int, string, bool) {
		switch o.UserID {
		case "past":
			return 200, fmt.Sprintf(`{"action":"extend","deadline":%q}`, time.Now().Add(-time.Second).UTC().Format(hourglass.TimeFormat)), false
		case "moment":
			return 200, fmt.Sprintf(`{"action":"extend","deadline":%q}`, time.Now().Add(time.Millisecond).UTC().Format(hourglass.TimeFormat)), false
		case "paid":
			return 200, fmt.Sprintf(`{"action":"paid","payment_id":"pay-%d"}`, o.ID), false
		}
		return 500, "unknown user", false
	}}
	var logs lockedBuffer
	n := startCheckedNodeLog(t, BeforeClose{}, rc, slog.New(slog.NewTextHandler(&logs, nil)))
	past, moment, paid := createFor(t, n, "past"), createFor(t, n, "moment"), createFor(t, n, "paid")
	await(t, n, paid.ID, "paid", func(o hourglass.Order) bool { return o.Status == hourglass.StatePaid })
	testenv.Phase(t, time.Until(past.Deadline.Add(3*time.Second)), "3 s past the deadlines")
	for _, o := range []hourglass.Order{past, moment} {
		calls := rc.count(o.ID)
		if calls < 2 || calls > 10 {
			t.Errorf("order %s checked %d times in 3 s; want a few, spaced by the backoff", o.UserID, calls)
		}
		cur, err := n.Store.Order(context.Background(), o.ID)
		if err != nil || cur.Status != hourglass.StatePendingPayment {
			t.Errorf("order %s is %+v, %v; want pending", o.UserID, cur, err)
		}
	}
	metrics := scrape(t, n)
	if strings.Contains(metrics, `hourglass_before_close_calls_total{answer="extend_invalid"} 0`) || !strings.Contains(metrics, `answer="extend_invalid"`) {
		t.Errorf("metrics count no extend_invalid:\n%s", grep(metrics, "before_close_calls"))
	}
	text := logs.String()
	if !strings.Contains(text, "marked paid instead of closed") || strings.Contains(text, "marking it paid failed") {
		t.Errorf("the paid answer's log:\n%s", grep(text, "paid"))
	}
}
