package sqlite_test

import (
	"cmp"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/sqlite"
	zsqlite "zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

type eventsFixture struct {
	ctx   context.Context
	clock *hourglasstest.Clock
	store *sqlite.Store
}

func setupEvents(t *testing.T) eventsFixture {
	t.Helper()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s := open(t, t.TempDir(), clock)
	ctx := context.Background()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 100}); err != nil {
		t.Fatal(err)
	}
	return eventsFixture{ctx: ctx, clock: clock, store: s}
}

func (f eventsFixture) create(t *testing.T, key string) hourglass.Order {
	t.Helper()
	o, _, err := f.store.CreateOrder(f.ctx, hourglass.CreateOrderParams{
		UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Minute,
		IdempotencyKey: key, RequestHash: []byte("h"),
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return o
}

func (f eventsFixture) events(t *testing.T, orderID int64) []hourglass.EventRecord {
	t.Helper()
	evs, err := f.store.OrderEvents(f.ctx, orderID)
	if err != nil {
		t.Fatalf("events of %d: %v", orderID, err)
	}
	return evs
}

func eventTypes(evs []hourglass.EventRecord) []hourglass.EventType {
	var out []hourglass.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// TestEveryTransitionWritesOneEvent: each committed transition writes
// exactly one event, with a unique id and the order as committed; refused
// transitions and idempotent repeats write none.
func TestEveryTransitionWritesOneEvent(t *testing.T) {
	t.Parallel()
	f := setupEvents(t)
	ctx := f.ctx

	shipped := f.create(t, "k1")
	if _, _, err := f.store.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Minute, IdempotencyKey: "k1", RequestHash: []byte("h")}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	paid, err := f.store.PayOrder(ctx, shipped.ID, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.PayOrder(ctx, shipped.ID, "p1"); err != nil { // an idempotent repeat
		t.Fatal(err)
	}
	if _, err := f.store.PayOrder(ctx, shipped.ID, "p2"); hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable {
		t.Fatalf("pay with another id: %v", err)
	}
	if _, err := f.store.TransitionOrder(ctx, shipped.ID, hourglass.ActionShip); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionOrder(ctx, shipped.ID, hourglass.ActionShip); hourglass.ErrorCode(err) != hourglass.CodeInvalidTransition {
		t.Fatalf("ship twice: %v", err)
	}
	completed, err := f.store.TransitionOrder(ctx, shipped.ID, hourglass.ActionComplete)
	if err != nil {
		t.Fatal(err)
	}

	cancelled := f.create(t, "")
	if _, err := f.store.TransitionOrder(ctx, cancelled.ID, hourglass.ActionCancel); err != nil {
		t.Fatal(err)
	}
	closed := f.create(t, "")
	f.clock.Advance(time.Minute)
	got, err := f.store.CloseOrders(ctx, []int64{closed.ID, cancelled.ID})
	if err != nil || len(got) != 1 {
		t.Fatalf("close: %+v, %v", got, err)
	}
	if again, _ := f.store.CloseOrders(ctx, []int64{closed.ID}); len(again) != 0 {
		t.Fatalf("second close closed %+v", again)
	}

	tests := []struct {
		order int64
		want  []hourglass.EventType
	}{
		{shipped.ID, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid, hourglass.EventOrderShipped, hourglass.EventOrderCompleted}},
		{cancelled.ID, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderCancelled}},
		{closed.ID, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderClosed}},
	}
	ids := map[string]bool{}
	for _, tt := range tests {
		evs := f.events(t, tt.order)
		if got := eventTypes(evs); !slices.Equal(got, tt.want) {
			t.Errorf("order %d: events %v, want %v", tt.order, got, tt.want)
		}
		for _, e := range evs {
			if ids[e.ID] || len(e.ID) < 20 {
				t.Errorf("event id %q repeated or too short", e.ID)
			}
			ids[e.ID] = true
			var body struct {
				ID        string          `json:"id"`
				Type      string          `json:"type"`
				CreatedAt string          `json:"created_at"`
				Order     json.RawMessage `json:"order"`
			}
			if err := json.Unmarshal(e.Body, &body); err != nil {
				t.Fatalf("event body %s: %v", e.Body, err)
			}
			if body.ID != e.ID || body.Type != string(e.Type) || body.CreatedAt != e.CreatedAt.Format(hourglass.TimeFormat) {
				t.Errorf("event body %s does not match its row %+v", e.Body, e)
			}
		}
	}

	// The snapshots are the order as each transition committed it.
	snapshot := func(orderID int64, i int) string {
		evs := f.events(t, orderID)
		var body struct {
			Order json.RawMessage `json:"order"`
		}
		json.Unmarshal(evs[i].Body, &body)
		return string(body.Order)
	}
	if got, want := snapshot(shipped.ID, 0), string(hourglass.MarshalOrder(shipped)); got != want {
		t.Errorf("created snapshot\n got %s\nwant %s", got, want)
	}
	if got, want := snapshot(shipped.ID, 1), string(hourglass.MarshalOrder(paid)); got != want {
		t.Errorf("paid snapshot\n got %s\nwant %s", got, want)
	}
	if got, want := snapshot(shipped.ID, 3), string(hourglass.MarshalOrder(completed)); got != want {
		t.Errorf("completed snapshot\n got %s\nwant %s", got, want)
	}
	stored, err := f.store.Order(ctx, closed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snapshot(closed.ID, 1), string(hourglass.MarshalOrder(stored)); got != want {
		t.Errorf("closed snapshot\n got %s\nwant %s", got, want)
	}
	if stored.CloseReason != hourglass.CloseReasonTimeout {
		t.Errorf("closed order %+v has no close reason", stored)
	}
}

func (f eventsFixture) webhook(t *testing.T, events ...hourglass.EventType) hourglass.Webhook {
	t.Helper()
	w, err := f.store.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: "https://hooks.example.com/x", Events: events, Secret: "0123456789abcdef"}, 0)
	if err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	return w
}

func (f eventsFixture) pending(t *testing.T) []hourglass.PendingDelivery {
	t.Helper()
	timers, err := f.store.DueDeliveries(f.ctx, hourglass.DueDeliveriesParams{Until: hourglass.FromUnixMilli(1 << 50), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []hourglass.PendingDelivery
	for _, tm := range timers {
		d, err := f.store.PendingDelivery(f.ctx, tm.ID)
		if err != nil {
			t.Fatalf("pending delivery %d: %v", tm.ID, err)
		}
		if !d.NextAttemptAt.Equal(tm.At) {
			t.Errorf("delivery %d: timer at %v, row at %v", tm.ID, tm.At, d.NextAttemptAt)
		}
		out = append(out, d)
	}
	return out
}

// TestFanOut: an event creates one delivery per subscribed webhook in its
// transaction, due at once; unsubscribed webhooks get none.
func TestFanOut(t *testing.T) {
	t.Parallel()
	f := setupEvents(t)
	all := f.webhook(t, hourglass.EventTypeAll)
	paidOnly := f.webhook(t, hourglass.EventOrderPaid)
	f.webhook(t, hourglass.EventOrderShipped)

	select {
	case <-f.store.DeliveriesCreated():
		t.Fatal("wake-up before any delivery")
	default:
	}
	o := f.create(t, "")
	select {
	case <-f.store.DeliveriesCreated():
	default:
		t.Fatal("no wake-up after a create that fanned out")
	}
	if _, err := f.store.PayOrder(f.ctx, o.ID, "p"); err != nil {
		t.Fatal(err)
	}
	ds := f.pending(t)
	type key struct {
		webhook int64
		typ     hourglass.EventType
	}
	var got []key
	for _, d := range ds {
		got = append(got, key{d.WebhookID, d.EventType})
		if d.OrderID != o.ID || d.Attempts != 0 || d.URL != all.URL || d.Secret != "0123456789abcdef" || len(d.Body) == 0 {
			t.Errorf("delivery %+v", d)
		}
	}
	want := []key{{all.ID, hourglass.EventOrderCreated}, {all.ID, hourglass.EventOrderPaid}, {paidOnly.ID, hourglass.EventOrderPaid}}
	byWebhook := func(a, b key) int { return cmp.Or(cmp.Compare(a.typ, b.typ), cmp.Compare(a.webhook, b.webhook)) }
	slices.SortFunc(got, byWebhook)
	slices.SortFunc(want, byWebhook)
	if !slices.Equal(got, want) {
		t.Errorf("deliveries %+v, want %+v", got, want)
	}
	// Per-order order: the paid event to the first webhook waits for the created one.
	for _, d := range ds {
		blocked := d.WebhookID == all.ID && d.EventType == hourglass.EventOrderPaid
		if (d.BlockedBy.ID != 0) != blocked {
			t.Errorf("delivery %d (%s to %d): blocked by %+v", d.ID, d.EventType, d.WebhookID, d.BlockedBy)
		}
	}
	if p, dead, err := f.store.DeliveryCounts(f.ctx); p != 3 || dead != 0 || err != nil {
		t.Errorf("counts %d pending, %d dead, %v", p, dead, err)
	}
}

// TestDeliveryLifecycle: attempts are recorded as a compare-and-set; the last
// failure makes a dead letter, which can be listed, retried (pending, due
// now, attempts reset) and deleted; deleting a webhook removes its rows.
func TestDeliveryLifecycle(t *testing.T) {
	t.Parallel()
	f := setupEvents(t)
	ctx := f.ctx
	w := f.webhook(t, hourglass.EventOrderCreated, hourglass.EventOrderCancelled)
	o := f.create(t, "")
	if _, err := f.store.TransitionOrder(ctx, o.ID, hourglass.ActionCancel); err != nil {
		t.Fatal(err)
	}
	ds := f.pending(t)
	if len(ds) != 2 {
		t.Fatalf("deliveries %+v", ds)
	}
	first, second := ds[0], ds[1]

	retryAt := f.clock.Now().Add(time.Minute)
	if ok, err := f.store.RecordAttempt(ctx, hourglass.AttemptResult{ID: first.ID, Attempts: 0, Error: "HTTP 500", RetryAt: retryAt}); !ok || err != nil {
		t.Fatalf("record retry: %v, %v", ok, err)
	}
	if ok, _ := f.store.RecordAttempt(ctx, hourglass.AttemptResult{ID: first.ID, Attempts: 0, OK: true}); ok {
		t.Fatal("a stale attempt count was recorded")
	}
	d, _ := f.store.PendingDelivery(ctx, first.ID)
	if d.Attempts != 1 || !d.NextAttemptAt.Equal(retryAt) {
		t.Fatalf("after a retry: %+v", d)
	}
	due, err := f.store.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: f.clock.Now(), Limit: 10})
	if err != nil || len(due) != 1 || due[0].ID != second.ID {
		t.Fatalf("due now: %+v, %v; want only the second", due, err)
	}
	if next, ok, _ := f.store.NextDelivery(ctx, w.ID, o.ID); !ok || next.ID != first.ID {
		t.Fatalf("next of the stream: %+v, %v", next, ok)
	}

	f.clock.Advance(2 * time.Minute)
	if ok, err := f.store.RecordAttempt(ctx, hourglass.AttemptResult{ID: first.ID, Attempts: 1, Error: "HTTP 503: down"}); !ok || err != nil {
		t.Fatalf("record dead: %v, %v", ok, err)
	}
	if _, err := f.store.PendingDelivery(ctx, first.ID); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("a dead letter is still pending: %v", err)
	}
	// With the first dead, the second is no longer blocked.
	if d, _ := f.store.PendingDelivery(ctx, second.ID); d.BlockedBy.ID != 0 {
		t.Fatalf("second still blocked by %+v", d.BlockedBy)
	}
	dls, err := f.store.DeadLetters(ctx, 0, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	want := hourglass.DeadLetter{ID: first.ID, WebhookID: w.ID, EventID: first.EventID, EventType: hourglass.EventOrderCreated,
		OrderID: o.ID, Attempts: 2, LastError: "HTTP 503: down", FailedAt: f.clock.Now().Truncate(time.Millisecond).UTC()}
	if dls[0] != want {
		t.Fatalf("dead letter\n got %+v\nwant %+v", dls[0], want)
	}
	if _, dead, _ := f.store.DeliveryCounts(ctx); dead != 1 {
		t.Fatalf("dead count %d", dead)
	}

	if _, err := f.store.RetryDeadLetter(ctx, second.ID); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("retry of a pending delivery: %v, want not_found", err)
	}
	tm, err := f.store.RetryDeadLetter(ctx, first.ID)
	if err != nil || tm.ID != first.ID || !tm.At.Equal(f.clock.Now().Truncate(time.Millisecond)) {
		t.Fatalf("retry: %+v, %v", tm, err)
	}
	if d, err := f.store.PendingDelivery(ctx, first.ID); err != nil || d.Attempts != 0 {
		t.Fatalf("retried: %+v, %v", d, err)
	}
	if d, _ := f.store.PendingDelivery(ctx, second.ID); d.BlockedBy.ID != first.ID {
		t.Fatalf("second not blocked by the retried first: %+v", d.BlockedBy)
	}
	if _, err := f.store.RetryDeadLetter(ctx, first.ID); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("retry twice: %v", err)
	}

	// Dead again, then deleted.
	f.store.RecordAttempt(ctx, hourglass.AttemptResult{ID: first.ID, Attempts: 0, Error: "x"})
	if dl, err := f.store.DeleteDeadLetter(ctx, first.ID); err != nil || dl.ID != first.ID {
		t.Fatalf("delete dead letter: %+v, %v", dl, err)
	}
	if _, err := f.store.DeleteDeadLetter(ctx, first.ID); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("delete twice: %v", err)
	}

	if ok, err := f.store.RecordAttempt(ctx, hourglass.AttemptResult{ID: second.ID, Attempts: 0, OK: true}); !ok || err != nil {
		t.Fatalf("record delivered: %v, %v", ok, err)
	}
	if p, dead, _ := f.store.DeliveryCounts(ctx); p != 0 || dead != 0 {
		t.Fatalf("counts after all: %d pending, %d dead", p, dead)
	}

	// Deleting the webhook removes its pending deliveries and dead letters.
	o2 := f.create(t, "")
	if got, err := f.store.DeleteWebhook(ctx, w.ID); err != nil || got.ID != w.ID || !slices.Equal(got.Events, w.Events) {
		t.Fatalf("delete webhook: %+v, %v", got, err)
	}
	if p, _, _ := f.store.DeliveryCounts(ctx); p != 0 {
		t.Fatalf("%d deliveries of a deleted webhook remain", p)
	}
	if _, err := f.store.DeleteWebhook(ctx, w.ID); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("delete twice: %v", err)
	}
	if ws, _ := f.store.Webhooks(ctx, hourglass.WebhookFilter{Limit: 10}); len(ws) != 0 {
		t.Fatalf("webhooks after delete: %+v", ws)
	}
	f.create(t, "")
	if p, _, _ := f.store.DeliveryCounts(ctx); p != 0 {
		t.Fatalf("a deleted webhook still receives deliveries")
	}
	_ = o2
}

// TestPruneEvents: old events no delivery needs are pruned; events of
// pending deliveries and dead letters are kept.
func TestPruneEvents(t *testing.T) {
	t.Parallel()
	f := setupEvents(t)
	old := f.create(t, "")
	w := f.webhook(t, hourglass.EventTypeAll)
	kept := f.create(t, "")
	f.clock.Advance(48 * time.Hour)
	recent := f.create(t, "")
	if _, err := f.store.DeleteWebhook(f.ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	w = f.webhook(t, hourglass.EventTypeAll)
	f.clock.Advance(-47 * time.Hour) // back: make a delivery for an old event
	keptDead := f.create(t, "")
	ds := f.pending(t)
	f.store.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: ds[0].ID, Error: "x"}) // dead
	f.clock.Advance(47 * time.Hour)

	n, err := f.store.PruneEvents(f.ctx, f.clock.Now().Add(-24*time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("pruned %d events, want 2 (old's and kept's created)", n)
	}
	for _, tt := range []struct {
		id   int64
		want int
	}{{old.ID, 0}, {kept.ID, 0}, {recent.ID, 1}, {keptDead.ID, 1}} {
		if got := len(f.events(t, tt.id)); got != tt.want {
			t.Errorf("order %d: %d events left, want %d", tt.id, got, tt.want)
		}
	}
	if dls, _ := f.store.DeadLetters(f.ctx, 0, 10); len(dls) != 1 {
		t.Errorf("dead letter lost its event: %+v", dls)
	}
}

// TestEventIsInTheTransitionsTransaction: when the event cannot be written,
// the transition it records does not happen either (nor its stock move).
func TestEventIsInTheTransitionsTransaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s := open(t, dir, clock)
	ctx := context.Background()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 3}}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Break event writes from outside: a trigger that aborts every insert.
	conn, err := zsqlite.OpenConn(filepath.Join(dir, sqlite.FileNameDefault), zsqlite.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := sqlitex.ExecuteTransient(conn, `CREATE TRIGGER no_events BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'events are broken'); END`, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PayOrder(ctx, o.ID, "p"); err == nil || !strings.Contains(err.Error(), "events are broken") {
		t.Fatalf("pay without its event: %v, want the trigger's error", err)
	}
	f := eventsFixture{ctx: ctx, clock: clock, store: s}
	if _, err := s.TransitionOrder(ctx, o.ID, hourglass.ActionCancel); err == nil {
		t.Fatal("cancel succeeded without its event")
	}
	clock.Advance(time.Minute)
	if closed, err := s.CloseOrders(ctx, []int64{o.ID}); err == nil {
		t.Fatalf("close succeeded without its event: %+v", closed)
	}
	got, err := s.Order(ctx, o.ID)
	if err != nil || got.Status != hourglass.StatePendingPayment || got.PaymentID != "" {
		t.Fatalf("order after failed transitions: %+v, %v", got, err)
	}
	if p, _ := s.Product(ctx, "A"); p.Available != 7 || p.Reserved != 3 || p.Sold != 0 {
		t.Fatalf("stock moved without the event: %+v", p)
	}
	if evs := f.events(t, o.ID); len(evs) != 1 {
		t.Fatalf("events %+v, want only the created one", evs)
	}
	if err := sqlitex.ExecuteTransient(conn, `DROP TRIGGER no_events`, nil); err != nil {
		t.Fatal(err)
	}
	if closed, err := s.CloseOrders(ctx, []int64{o.ID}); err != nil || len(closed) != 1 {
		t.Fatalf("close once events work again: %+v, %v", closed, err)
	}
	if got := eventTypes(f.events(t, o.ID)); !slices.Equal(got, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderClosed}) {
		t.Fatalf("events %v", got)
	}
}

// TestFanOutAfterReopen: webhooks stored by an earlier run receive the
// events of this one (the store's count of webhooks starts from the
// database).
func TestFanOutAfterReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s, err := sqlite.Open(sqlite.Config{Dir: dir, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	f := eventsFixture{ctx: context.Background(), clock: clock, store: s}
	if _, err := s.PutProduct(f.ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	f.webhook(t, hourglass.EventOrderCreated)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.store = open(t, dir, clock)
	o := f.create(t, "")
	ds := f.pending(t)
	if len(ds) != 1 || ds[0].OrderID != o.ID {
		t.Fatalf("deliveries after reopen: %+v", ds)
	}
}
