package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

func mustProduct(t *testing.T, s hourglass.Store, sku string, available int64) {
	t.Helper()
	if _, err := s.PutProduct(context.Background(), hourglass.Product{SKU: sku, Name: sku, Category: "x", Available: available}); err != nil {
		t.Fatal(err)
	}
}

func mustCreate(t *testing.T, s hourglass.Store, timeout time.Duration, sku string) hourglass.Order {
	t.Helper()
	o, _, err := s.CreateOrder(context.Background(), hourglass.CreateOrderParams{UserID: "u", Timeout: timeout, Items: []hourglass.Item{{SKU: sku, Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func stockOf(t *testing.T, s hourglass.Store, sku string) [3]int64 {
	t.Helper()
	p, err := s.Product(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	return [3]int64{p.Available, p.Reserved, p.Sold}
}

// TestDatabaseClockBoundary runs the boundary on the database server's
// clock (Clock nil, as in production): a payment 100 ms before the deadline
// succeeds, one 100 ms after fails; a close before the deadline is a no-op,
// after it closes.
func TestDatabaseClockBoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, pgtest.NewDatabase(t), nil, false)
	mustProduct(t, s, "A", 10)
	start := time.Now()
	early := mustCreate(t, s, 2*time.Second, "A")
	late := mustCreate(t, s, 2*time.Second, "A")
	if d := early.CreatedAt.Sub(start); d < -time.Second || d > 5*time.Second {
		t.Fatalf("created_at %v is not the database's now (test started %v)", early.CreatedAt, start)
	}
	if closed, err := s.CloseOrders(ctx, []int64{early.ID, late.ID}); err != nil || len(closed) != 0 {
		t.Fatalf("close before the deadline = %v, %v; want a no-op", closed, err)
	}
	testenv.Phase(t, time.Until(early.Deadline.Add(-100*time.Millisecond)), "until 100 ms before the early deadline")
	if paid, err := s.PayOrder(ctx, early.ID, "p1"); err != nil || paid.Status != hourglass.StatePaid || !paid.PaidAt.Before(paid.Deadline) {
		t.Fatalf("pay 100 ms before the deadline: %+v, %v", paid, err)
	}
	testenv.Phase(t, time.Until(late.Deadline.Add(100*time.Millisecond)), "until 100 ms past the late deadline")
	if _, err := s.PayOrder(ctx, late.ID, "p2"); hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable {
		t.Fatalf("pay 100 ms after the deadline = %v, want order_not_payable", err)
	}
	if _, err := s.TransitionOrder(ctx, late.ID, hourglass.ActionCancel); hourglass.ErrorCode(err) != hourglass.CodeInvalidTransition {
		t.Fatalf("cancel after the deadline = %v, want invalid_transition", err)
	}
	closed, err := s.CloseOrders(ctx, []int64{early.ID, late.ID})
	if err != nil || len(closed) != 1 || closed[0].OrderID != late.ID || closed[0].ClosedAt.Before(late.Deadline) {
		t.Fatalf("close after the deadline = %+v, %v; want the late order, closed at or after its deadline", closed, err)
	}
	if got := stockOf(t, s, "A"); got != [3]int64{9, 0, 1} {
		t.Fatalf("stock %v", got)
	}
}

// TestLostConnection cuts the store's connection while a write waits inside
// its transaction: the write fails with CodeUnavailable, and the store works
// again once the database is back.
func TestLostConnection(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"proxy cut", "backend terminated"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.NewDatabase(t)
			u, _ := url.Parse(db)
			proxy := testenv.NewProxy(t, u.Host)
			u.Host = proxy.Addr()
			s := open(t, u.String(), nil, false)
			mustProduct(t, s, "A", 10)

			// Hold A's row lock so that the create waits inside its transaction.
			conn, err := pgx.Connect(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT 1 FROM products WHERE sku = 'A' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}})
				done <- err
			}()
			var pid int
			testenv.Eventually(t, 10*time.Second, "the create waiting for the lock", func() bool {
				// conn is inside tx, and a transaction reads one snapshot
				// of pg_stat_activity: clear it, or a first look taken
				// before the create waited is all this loop ever sees.
				if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
					t.Fatal(err)
				}
				return conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&pid) == nil
			})
			if how == "proxy cut" {
				proxy.Cut()
			} else if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
					t.Fatalf("create on a lost connection = %v, want unavailable", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the create did not return after its connection was lost")
			}
			if err := s.WriteHealth(); hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
				t.Fatalf("WriteHealth after a lost write = %v, want unavailable (for /readyz)", err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			proxy.Restore()
			// With no traffic, the store's probe write clears it once the
			// database is reachable again.
			testenv.Eventually(t, 10*time.Second, "WriteHealth clear after the connection came back", func() bool { return s.WriteHealth() == nil })
			var o hourglass.Order
			testenv.Eventually(t, 5*time.Second, "a create after the database came back", func() bool {
				o, _, err = s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}})
				if err != nil && hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
					t.Fatalf("create after the database came back: %v", err)
				}
				return err == nil
			})

			if got := stockOf(t, s, "A"); got != [3]int64{9, 1, 0} {
				t.Fatalf("stock %v, want only the second create reserved", got)
			}
			if _, err := s.PayOrder(ctx, o.ID, "p"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHotSKUManyStores creates orders of one SKU from many goroutines over
// three store values (as three processes would): exactly the stock is sold,
// never more.
func TestHotSKUManyStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	stores := []*postgres.Store{open(t, db, nil, false), open(t, db, nil, false), open(t, db, nil, false)}
	const stock, goroutines, each = 500, 20, 20
	mustProduct(t, stores[0], "HOT", stock)
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		created, refused int
	)
	for _, s := range stores {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "HOT", Quantity: 1}}})
					mu.Lock()
					if err == nil {
						created++
					} else if hourglass.ErrorCode(err) == hourglass.CodeInsufficientStock {
						refused++
					} else {
						t.Errorf("create: %v", err)
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	total := len(stores) * goroutines * each
	if created != stock || refused != total-stock {
		t.Fatalf("created %d, refused %d; want %d and %d", created, refused, stock, total-stock)
	}
	if got := stockOf(t, stores[1], "HOT"); got != [3]int64{0, stock, 0} {
		t.Fatalf("stock %v", got)
	}
}

// TestPayCloseRace pays from one store value and closes from another, both
// at the deadline on the database's clock: every order ends paid or closed,
// never both, and the stock adds up.
func TestPayCloseRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	a, b := open(t, db, nil, false), open(t, db, nil, false)
	const n = 200
	mustProduct(t, a, "A", n)
	ids := make([]int64, n)
	var deadline time.Time
	for i := range ids {
		o := mustCreate(t, a, 2*time.Second, "A")
		ids[i] = o.ID
		if o.Deadline.After(deadline) {
			deadline = o.Deadline
		}
	}
	first, _ := a.Order(ctx, ids[0])
	testenv.Phase(t, time.Until(first.Deadline.Add(-30*time.Millisecond)), "until 30 ms before the first deadline")
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		paid   = map[int64]bool{}
		closed = map[int64]bool{}
	)
	for g := range 8 {
		wg.Add(1)
		go func() { // payers, one per order, spread over 8 goroutines
			defer wg.Done()
			for i := g; i < n; i += 8 {
				o, err := a.PayOrder(ctx, ids[i], fmt.Sprint("p", i))
				switch {
				case err == nil:
					if o.Status != hourglass.StatePaid {
						t.Errorf("paid order %d is %s", o.ID, o.Status)
					}
					mu.Lock()
					paid[ids[i]] = true
					mu.Unlock()
				case hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable:
					t.Errorf("pay: %v", err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the closer keeps closing until every deadline passed
		defer wg.Done()
		for {
			cs, err := b.CloseOrders(ctx, ids)
			if err != nil {
				t.Errorf("close: %v", err)
				return
			}
			mu.Lock()
			for _, c := range cs {
				if closed[c.OrderID] {
					t.Errorf("order %d closed twice", c.OrderID)
				}
				closed[c.OrderID] = true
			}
			mu.Unlock()
			if time.Now().After(deadline.Add(200 * time.Millisecond)) {
				return
			}
		}
	}()
	wg.Wait()
	var nPaid, nClosed int
	for _, id := range ids {
		o, err := b.Order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case paid[id] && closed[id]:
			t.Errorf("order %d was both paid and closed", id)
		case paid[id] && o.Status == hourglass.StatePaid:
			nPaid++
		case closed[id] && o.Status == hourglass.StateClosed:
			nClosed++
			if o.ClosedAt.Before(o.Deadline) {
				t.Errorf("order %d closed at %v before its deadline %v", id, o.ClosedAt, o.Deadline)
			}
		default:
			t.Errorf("order %d is %s (paid reported %v, closed reported %v)", id, o.Status, paid[id], closed[id])
		}
		if o.Status == hourglass.StatePaid && !o.PaidAt.Before(o.Deadline) {
			t.Errorf("order %d paid at %v, not before its deadline %v", id, o.PaidAt, o.Deadline)
		}
	}
	if got := stockOf(t, a, "A"); got != [3]int64{int64(nClosed), 0, int64(nPaid)} {
		t.Fatalf("stock %v, want %d available (closed), 0 reserved, %d sold (paid)", got, nClosed, nPaid)
	}
	t.Logf("%d paid, %d closed", nPaid, nClosed)
}

// TestDeliveriesOutOfIDOrder commits a delivery with a smaller id after one
// with a larger id: DueDeliveries returns both by due time.
func TestDeliveriesOutOfIDOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	s := open(t, db, nil, false)
	w, err := s.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://example.com/hook", Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: "0123456789abcdef"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustProduct(t, s, "A", 10)
	early := mustCreate(t, s, time.Minute, "A") // the order the slow transaction's event is about

	// Another process's transaction draws a delivery id, then commits late.
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var slowID int64
	if err := tx.QueryRow(ctx, `WITH e AS (
	INSERT INTO events (id, type, order_id, created_at) VALUES ('evt_slow', 'order.paid', $1, $2) RETURNING seq
) INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
SELECT $3, seq, $1, 'pending', $2 FROM e RETURNING id`, early.ID, hourglass.UnixMilli(time.Now()), w.ID).Scan(&slowID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, time.Minute, "A") // its delivery's id is larger, committed first
	until := time.Now().Add(time.Hour)
	due := func() []int64 {
		ts, err := s.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: until, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, d := range ts {
			ids = append(ids, d.ID)
		}
		return ids
	}
	before := due()
	if slices.Contains(before, slowID) || len(before) != 2 {
		t.Fatalf("before the slow commit: %v (slow id %d uncommitted)", before, slowID)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := due()
	if !slices.Contains(after, slowID) || len(after) != 3 {
		t.Fatalf("after the slow commit: %v, want 3 including %d", after, slowID)
	}
	if slowID > slices.Max(before) {
		t.Fatalf("slow id %d was not drawn before the committed ones %v: the test did not commit out of order", slowID, before)
	}
}

// TestNotifyAcrossStores checks that a commit creating deliveries through
// one store value wakes DeliveriesCreated of another (LISTEN/NOTIFY).
func TestNotifyAcrossStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	a, b := open(t, db, nil, false), open(t, db, nil, false)
	other := open(t, pgtest.NewDatabase(t), nil, false) // another database: never woken
	if _, err := a.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://example.com/hook", Events: []hourglass.EventType{hourglass.EventOrderCreated}, Secret: "0123456789abcdef"}, 0); err != nil {
		t.Fatal(err)
	}
	mustProduct(t, a, "A", 10)
	drain := func(ch <-chan struct{}) {
		for {
			select {
			case <-ch:
			default:
				return
			}
		}
	}
	drain(b.DeliveriesCreated())
	drain(other.DeliveriesCreated())
	mustCreate(t, a, time.Minute, "A")
	select {
	case <-b.DeliveriesCreated():
	case <-time.After(10 * time.Second):
		t.Fatal("store b was not woken by store a's delivery")
	}
	select {
	case <-a.DeliveriesCreated():
	default:
		t.Fatal("store a was not woken by its own delivery")
	}
	select {
	case <-other.DeliveriesCreated():
		t.Fatal("a store on another database was woken")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestListenerReconnects terminates the listening connection of a store
// value: it reconnects, and deliveries committed through another store value
// wake it again.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	a, b := open(t, db, nil, false), open(t, db, nil, false)
	if _, err := a.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://example.com/hook", Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: "0123456789abcdef"}, 0); err != nil {
		t.Fatal(err)
	}
	mustProduct(t, a, "A", 10)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&killed); err != nil || killed != 2 {
		t.Fatalf("terminated %d listeners (%v), want 2", killed, err)
	}
	// Wait until both listen again, then drain the reconnection hints.
	testenv.Eventually(t, 10*time.Second, "both listening again", func() bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})
	select {
	case <-b.DeliveriesCreated(): // the hint after reconnecting
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after the listener reconnected")
	}
	mustCreate(t, a, time.Minute, "A")
	select {
	case <-b.DeliveriesCreated():
	case <-time.After(10 * time.Second):
		t.Fatal("store b was not woken after its listener reconnected")
	}
}
