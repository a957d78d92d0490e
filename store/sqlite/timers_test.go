package sqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/sqlite"
)

// TestTimerIDsStartAtTimerIDBase: the first timer's id is TimerIDBase and
// the next ones follow it, across a reopen; orders keep their small ids.
func TestTimerIDsStartAtTimerIDBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s := open(t, dir, clock)
	arm := func(t *testing.T, s *sqlite.Store, key string) int64 {
		t.Helper()
		tm, created, err := s.ArmTimer(ctx, hourglass.ArmTimerParams{Key: key, Delay: time.Minute, RequestHash: []byte("h")})
		if err != nil || !created {
			t.Fatalf("ArmTimer(%s) = %v (created=%v)", key, err, created)
		}
		return tm.ID
	}
	for i, want := range []int64{hourglass.TimerIDBase, hourglass.TimerIDBase + 1} {
		if got := arm(t, s, fmt.Sprint("k", i)); got != want {
			t.Fatalf("timer %d has id %d, want %d", i, got, want)
		}
	}
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 1}); err != nil {
		t.Fatal(err)
	}
	o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Minute})
	if err != nil || o.ID != 1 {
		t.Fatalf("first order after timers: %+v, %v; want id 1", o, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, clock)
	if got := arm(t, s, "after-reopen"); got != hourglass.TimerIDBase+2 {
		t.Fatalf("timer after reopen has id %d, want %d", got, hourglass.TimerIDBase+2)
	}
	if tm, err := s.Timer(ctx, "k0"); err != nil || tm.ID != hourglass.TimerIDBase {
		t.Fatalf("Timer(k0) after reopen = %+v, %v", tm, err)
	}
}

// TestMigrationKeepsOrderEvents: events written before migration 4 added
// the body column (NULL for them) are still rendered from their order.
func TestMigrationKeepsOrderEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	created := hourglass.UnixMilli(hourglasstest.Epoch)
	databaseAt(t, dir, 3, fmt.Sprintf(`INSERT INTO products (sku, name, category, available, reserved) VALUES ('A', 'A', 'x', 9, 1);
INSERT INTO orders (id, user_id, status, items, created_at, deadline) VALUES (1, 'u', 'pending_payment', '[{"sku":"A","quantity":1}]', %d, %d);
INSERT INTO events (id, type, order_id, created_at) VALUES ('evt_old', 'order.created', 1, %d);
INSERT INTO webhooks (url, secret, created_at) VALUES ('https://hooks.example.com/a', '0123456789abcdef', %d);
INSERT INTO webhook_subscriptions (webhook_id, type) VALUES (1, '*');
INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at) VALUES (1, 1, 1, 'pending', %d);`,
		created, created+60000, created, created, created))
	s := open(t, dir, hourglasstest.NewClock(hourglasstest.Epoch))
	o, err := s.Order(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := string(hourglass.MarshalEvent(hourglass.Event{ID: "evt_old", Type: hourglass.EventOrderCreated, CreatedAt: hourglasstest.Epoch, Order: o}))
	evs, err := s.OrderEvents(ctx, 1)
	if err != nil || len(evs) != 1 || string(evs[0].Body) != want {
		t.Fatalf("OrderEvents after migration = %+v, %v; want the body %s", evs, err, want)
	}
	d, err := s.PendingDelivery(ctx, 1)
	if err != nil || string(d.Body) != want {
		t.Fatalf("PendingDelivery after migration = %+v, %v; want the body %s", d, err, want)
	}
}
