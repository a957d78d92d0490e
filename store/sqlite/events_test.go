package sqlite_test

import (
	"context"
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

// TestDeliveriesCreatedOnlyAfterFanOut: the wake-up fires after a commit
// that created deliveries, not after writes that created none. (The suite
// checks that it fires; a spurious wake-up is allowed by the contract, but
// this store has none.)
func TestDeliveriesCreatedOnlyAfterFanOut(t *testing.T) {
	t.Parallel()
	f := setupEvents(t)
	ch := f.store.DeliveriesCreated()
	f.create(t, "")
	f.webhook(t, hourglass.EventOrderPaid)
	o := f.create(t, "")
	select {
	case <-ch:
		t.Fatal("wake-up after writes that created no delivery")
	default:
	}
	if _, err := f.store.PayOrder(f.ctx, o.ID, "p"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("no wake-up after a pay that fanned out")
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
