package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// Tests of what the conformance suite cannot see: the database server's
// clock, several store values and processes, lost connections.

func put(t *testing.T, s hourglass.Store, sku string, available int64) {
	t.Helper()
	if _, err := s.PutProduct(context.Background(), hourglass.Product{SKU: sku, Name: sku, Category: "c", Available: available}); err != nil {
		t.Fatal(err)
	}
}

func stockOf(t *testing.T, s hourglass.Store, sku string) [3]int64 {
	t.Helper()
	p, err := s.Product(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	return [3]int64{p.Available, p.Reserved, p.Sold}
}

// TestDBClockBoundary: with no Config.Clock, the boundary is the database
// server's clock: a pay 500 ms before the deadline succeeds, one 500 ms
// after fails, and a close before the deadline does nothing. (At 100 ms,
// the close and the pay before the deadline took longer than that on a
// loaded CI machine, under -race.)
func TestDBClockBoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, mytest.NewDatabase(t), nil, false)
	put(t, s, "A", 10)
	before := time.Now()
	a, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d := a.CreatedAt.Sub(before); d < -50*time.Millisecond || d > 2*time.Second {
		t.Fatalf("created_at %v is not the server's now (%v before the call)", a.CreatedAt, before)
	}
	if a.Deadline.Sub(a.CreatedAt) != 2*time.Second {
		t.Fatalf("deadline %v, created %v", a.Deadline, a.CreatedAt)
	}
	// The wall clock is the database server's here (same host).
	testenv.Phase(t, time.Until(a.Deadline.Add(-500*time.Millisecond)), "to 500 ms before the deadline")
	if closed, err := s.CloseOrders(ctx, []int64{a.ID, b.ID}); err != nil || len(closed) != 0 {
		t.Fatalf("close before the deadline = %v, %v; want a no-op", closed, err)
	}
	paid, err := s.PayOrder(ctx, a.ID, "p")
	if err != nil || paid.Status != hourglass.StatePaid || !paid.PaidAt.Before(a.Deadline) {
		t.Fatalf("pay 500ms before the deadline: %+v, %v", paid, err)
	}
	testenv.Phase(t, time.Until(b.Deadline.Add(500*time.Millisecond)), "to 500 ms after the deadline")
	if _, err := s.PayOrder(ctx, b.ID, "p"); hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable {
		t.Fatalf("pay 500ms after the deadline = %v, want order_not_payable", err)
	}
	if _, err := s.TransitionOrder(ctx, b.ID, hourglass.ActionCancel); hourglass.ErrorCode(err) != hourglass.CodeInvalidTransition {
		t.Fatalf("cancel after the deadline = %v, want invalid_transition", err)
	}
	closed, err := s.CloseOrders(ctx, []int64{a.ID, b.ID})
	if err != nil || len(closed) != 1 || closed[0].OrderID != b.ID || closed[0].ClosedAt.Before(b.Deadline) {
		t.Fatalf("close after the deadline = %+v, %v; want only %d, closed at or after its deadline", closed, err, b.ID)
	}
	if got := stockOf(t, s, "A"); got != [3]int64{9, 0, 1} {
		t.Fatalf("stock %v", got)
	}
}

// TestLostConnectionMidWrite: a batch whose connection is cut while it
// waits for a row lock fails with unavailable (never a wrong answer), and
// the store works again once the server is reachable.
func TestLostConnectionMidWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := mytest.NewDatabase(t)
	u, _ := url.Parse(direct)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	s := open(t, u.String(), nil, false)
	put(t, s, "A", 10)

	// Hold A's row lock from another connection so the create's batch
	// waits inside its transaction.
	admin := mytest.Admin(t, direct)
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT * FROM products WHERE sku = 'A' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Minute})
		result <- err
	}()
	waitForLockWait(t, admin, u.Path[1:])
	proxy.Cut()
	err = <-result
	if hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
		t.Fatalf("create on a cut connection = %v, want unavailable", err)
	}
	if err := s.WriteHealth(); hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
		t.Fatalf("WriteHealth after a lost write = %v, want unavailable (for /readyz)", err)
	}
	tx.Rollback()
	proxy.Restore()
	// With no traffic, the store's probe write clears it once the database
	// is reachable again.
	testenv.Eventually(t, 10*time.Second, "WriteHealth clear after the connection came back", func() bool { return s.WriteHealth() == nil })
	if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Minute}); err != nil {
		t.Fatalf("create after the connection came back: %v", err)
	}
	if got := stockOf(t, s, "A"); got != [3]int64{9, 1, 0} {
		t.Fatalf("stock %v, want only the second create's reservation", got)
	}
}

// waitForLockWait waits until a statement of database db waits for a row lock.
func waitForLockWait(t *testing.T, admin *sql.DB, db string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "a statement waiting for the row lock", func() bool {
		var n int
		if err := admin.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE DB = ? AND ID <> CONNECTION_ID() AND INFO LIKE '%FOR UPDATE%' AND TIME >= 0 AND COMMAND = 'Query'`, db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// TestHotSKUNeverOversellsAcrossStores: many goroutines on three store
// values (three processes' worth of writers) create orders for one SKU.
func TestHotSKUNeverOversellsAcrossStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := mytest.NewDatabase(t)
	stores := []*mysql.Store{open(t, u, nil, false), open(t, u, nil, false), open(t, u, nil, false)}
	put(t, stores[0], "HOT", 500)
	var created, refused atomic.Int64
	var wg sync.WaitGroup
	for i, s := range stores {
		for g := range 16 {
			wg.Go(func() {
				for k := range 15 {
					_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint(i, g, k), Items: []hourglass.Item{{SKU: "HOT", Quantity: 1}}, Timeout: time.Hour})
					switch {
					case err == nil:
						created.Add(1)
					case hourglass.ErrorCode(err) == hourglass.CodeInsufficientStock:
						refused.Add(1)
					default:
						t.Errorf("create: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if created.Load() != 500 || refused.Load() != 3*16*15-500 {
		t.Fatalf("created %d, refused %d; want 500 and %d", created.Load(), refused.Load(), 3*16*15-500)
	}
	if got := stockOf(t, stores[1], "HOT"); got != [3]int64{0, 500, 0} {
		t.Fatalf("stock %v", got)
	}
}

// TestPayAndCloseRaceAtTheDeadline: one store value pays while another
// closes, around the orders' deadlines on the server's clock. Each order
// ends paid xor closed, with one event for it, and stock is conserved.
func TestPayAndCloseRaceAtTheDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := mytest.NewDatabase(t)
	payer, closer := open(t, u, nil, false), open(t, u, nil, false)
	const n, stock = 120, 1000
	put(t, payer, "A", stock)
	orders := make([]hourglass.Order, n)
	var wg sync.WaitGroup
	for i := range orders {
		wg.Go(func() {
			o, _, err := payer.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Second})
			if err != nil {
				t.Error(err)
			}
			orders[i] = o
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	ids := make([]int64, n)
	first, last := orders[0].Deadline, orders[0].Deadline
	for i, o := range orders {
		ids[i] = o.ID
		if o.Deadline.Before(first) {
			first = o.Deadline
		}
		if o.Deadline.After(last) {
			last = o.Deadline
		}
	}
	// The wall clock is the database server's here (same host). Each of 8
	// payers pays its k-th order (ids[8k+g]) at start + k×step: the 15
	// rounds spread evenly from 80 ms before the first deadline to 80 ms
	// after the last, over the boundary.
	start := first.Add(-80 * time.Millisecond)
	step := (last.Sub(first) + 160*time.Millisecond) / (n/8 - 1)
	testenv.Phase(t, time.Until(start), "to 80 ms before the first deadline")
	payOK := make([]bool, n)
	stop := last.Add(200 * time.Millisecond)
	wg.Go(func() {
		for time.Now().Before(stop) {
			if _, err := closer.CloseOrders(ctx, ids); err != nil {
				t.Errorf("close: %v", err)
				return
			}
		}
	})
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				if !testenv.Until(t.Context(), start.Add(time.Duration(i/8)*step)) {
					return
				}
				_, err := payer.PayOrder(ctx, ids[i], "pay")
				switch {
				case err == nil:
					payOK[i] = true
				case hourglass.ErrorCode(err) == hourglass.CodeOrderNotPayable:
				default:
					t.Errorf("pay: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if _, err := closer.CloseOrders(ctx, ids); err != nil {
		t.Fatal(err)
	}
	var paid, closed int64
	for i, id := range ids {
		o, err := payer.Order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := closer.OrderEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case o.Status == hourglass.StatePaid && payOK[i]:
			paid++
			if !o.PaidAt.Before(o.Deadline) {
				t.Errorf("order %d paid at %v, not before its deadline %v", id, o.PaidAt, o.Deadline)
			}
		case o.Status == hourglass.StateClosed && !payOK[i]:
			closed++
			if o.ClosedAt.Before(o.Deadline) {
				t.Errorf("order %d closed at %v, before its deadline %v", id, o.ClosedAt, o.Deadline)
			}
		default:
			t.Errorf("order %d is %s, pay succeeded: %v", id, o.Status, payOK[i])
		}
		if len(evs) != 2 || evs[1].Type != hourglass.EventFor(o.Status) {
			t.Errorf("order %d (%s) has events %v", id, o.Status, evs)
		}
	}
	t.Logf("%d paid, %d closed", paid, closed)
	if got := stockOf(t, closer, "A"); got != [3]int64{stock - paid, 0, paid} {
		t.Fatalf("stock %v, want %v", got, [3]int64{stock - paid, 0, paid})
	}
}

// TestDeliveriesCommittedOutOfIDOrder: a delivery whose id was handed out
// first but committed last is still returned by DueDeliveries.
func TestDeliveriesCommittedOutOfIDOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := mytest.NewDatabase(t)
	s := open(t, u, nil, false)
	put(t, s, "A", 10)
	w, err := s.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://example.com/h", Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: "0123456789abcdef"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	admin := mytest.Admin(t, u)
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	nowMs := time.Now().UnixMilli()
	if _, err := tx.Exec(`INSERT INTO events (id, type, order_id, created_at) VALUES ('evt_slow', 'order.created', 424242, ?)`, nowMs); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Exec(`INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
VALUES (?, LAST_INSERT_ID(), 424242, 'pending', 0, ?)`, w.ID, nowMs)
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := res.LastInsertId()
	o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.DeliveriesCreated():
	case <-time.After(5 * time.Second):
		t.Fatal("DeliveriesCreated did not fire after this store's commit")
	}
	until := time.Now().Add(time.Hour)
	due, err := s.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: until, Limit: 10})
	if err != nil || len(due) != 1 || due[0].ID <= slow {
		t.Fatalf("before the slow commit: %+v, %v; want only the fast delivery (id > %d)", due, err, slow)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	due, err = s.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: until, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, d := range due {
		got = append(got, d.ID)
	}
	if !slices.Contains(got, slow) || len(got) != 2 {
		t.Fatalf("after the slow commit: %v; want both, the slow one (%d) included", got, slow)
	}
	pd, err := s.PendingDelivery(ctx, due[slices.IndexFunc(due, func(d hourglass.DeliveryTimer) bool { return d.ID != slow })].ID)
	if err != nil || pd.OrderID != o.ID {
		t.Fatalf("PendingDelivery = %+v, %v", pd, err)
	}
}

// TestCloseDrainsAndIsIdempotent: Close waits for queued writes; writes
// after it fail with unavailable; a second Close is fine.
func TestCloseDrainsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := mysql.Open(ctx, mysql.Config{URL: mytest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "A", 1000)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 50 {
		wg.Go(func() {
			if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Hour}); err == nil {
				ok.Add(1)
			} else if hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
				t.Errorf("create racing Close: %v", err)
			}
		})
	}
	testenv.Phase(t, 5*time.Millisecond, "the creates reach the write queue before Close")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}}); hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
		t.Fatalf("create after Close = %v, want unavailable", err)
	}
	t.Logf("%d creates committed before Close returned", ok.Load())
}

// TestConcurrentCreatesShareCommits: concurrent creates are group-committed
// (Observe sees batches of more than one write) and every one commits.
func TestConcurrentCreatesShareCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var batches, writes, largest atomic.Int64
	s, err := mysql.Open(ctx, mysql.Config{URL: mytest.NewDatabase(t), Observe: func(n int, _ time.Duration) {
		batches.Add(1)
		writes.Add(int64(n))
		for {
			l := largest.Load()
			if int64(n) <= l || largest.CompareAndSwap(l, int64(n)) {
				return
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	put(t, s, "A", 10000)
	put(t, s, "B", 10000)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for range 10 {
				sku := []string{"A", "B"}[g%2]
				if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: sku, Quantity: 1}}, Timeout: time.Hour}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if writes.Load() != 640 || largest.Load() < 2 {
		t.Fatalf("%d writes in %d batches, largest %d: want 640 writes sharing commits", writes.Load(), batches.Load(), largest.Load())
	}
	t.Logf("640 creates in %d commits (largest %d)", batches.Load(), largest.Load())
	if a, b := stockOf(t, s, "A"), stockOf(t, s, "B"); a != [3]int64{9680, 320, 0} || b != [3]int64{9680, 320, 0} {
		t.Fatalf("stock A %v B %v", a, b)
	}
}
