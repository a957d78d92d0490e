package hourglasstest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseConcurrency covers the check-then-write steps under concurrent
// callers of one store value. The Shared area repeats the ones that matter
// across two store values.
func exerciseConcurrency(t *testing.T, h StoreHarness) {
	t.Run("CreatesNeverOversell", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 100)
		f.product(t, "B", "x", 40)
		oversell(t, []storeFixture{f})
	})

	t.Run("PayAgainstCloseAtTheDeadline", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		payAgainstClose(t, f, f)
	})

	t.Run("OnePaymentWins", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 10)
		o := f.create(t, time.Minute, item("A", 3))
		var won atomic.Int64
		var wg sync.WaitGroup
		for g := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := f.db.PayOrder(f.ctx, o.ID, fmt.Sprint("pay-", g))
				switch {
				case err == nil:
					won.Add(1)
				case hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable:
					t.Errorf("PayOrder: %v", err)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d concurrent payments with different ids succeeded, want 1", won.Load())
		}
		if got := f.stock(t, "A"); got != [3]int64{7, 0, 3} {
			t.Fatalf("stock %v, want sold once", got)
		}
	})

	t.Run("RetriedRequests", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 10)
		o := f.create(t, time.Minute, item("A", 3))
		// The same payment sent many times at once (a client's retries): all succeed, it counts once.
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := f.db.PayOrder(f.ctx, o.ID, "pay-1")
				if err != nil || got.Status != hourglass.StatePaid || got.PaymentID != "pay-1" {
					t.Errorf("PayOrder(same id) = %+v, %v; want paid", got, err)
				}
			}()
		}
		wg.Wait()
		if got := f.stock(t, "A"); got != [3]int64{7, 0, 3} {
			t.Fatalf("stock %v, want sold once", got)
		}
		// The same transition many times at once: exactly one applies.
		var won atomic.Int64
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := f.db.TransitionOrder(f.ctx, o.ID, hourglass.ActionShip)
				switch {
				case err == nil:
					won.Add(1)
				case hourglass.ErrorCode(err) != hourglass.CodeInvalidTransition:
					t.Errorf("ship: %v", err)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d concurrent ships succeeded, want 1", won.Load())
		}
		want := []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid, hourglass.EventOrderShipped}
		if got := eventTypes(f.events(t, o.ID)); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v: one per transition", got, want)
		}
	})

	t.Run("PutProductDuringCreates", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		putDuringCreates(t, []storeFixture{f})
	})

	t.Run("CancelAgainstPay", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 100)
		var orders []hourglass.Order
		for range 30 {
			orders = append(orders, f.create(t, time.Minute, item("A", 2)))
		}
		var paid, cancelled atomic.Int64
		var wg sync.WaitGroup
		for _, o := range orders {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := f.db.PayOrder(f.ctx, o.ID, "p"); err == nil {
					paid.Add(1)
				} else if hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable {
					t.Errorf("PayOrder: %v", err)
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := f.db.TransitionOrder(f.ctx, o.ID, hourglass.ActionCancel); err == nil {
					cancelled.Add(1)
				} else if hourglass.ErrorCode(err) != hourglass.CodeInvalidTransition {
					t.Errorf("cancel: %v", err)
				}
			}()
		}
		wg.Wait()
		if paid.Load()+cancelled.Load() != 30 {
			t.Fatalf("%d paid + %d cancelled, want each of 30 orders exactly one", paid.Load(), cancelled.Load())
		}
		if got := f.stock(t, "A"); got != [3]int64{40 + 2*cancelled.Load(), 0, 2 * paid.Load()} {
			t.Fatalf("stock %v after %d paid, %d cancelled", got, paid.Load(), cancelled.Load())
		}
	})

	t.Run("ClosersCloseOnce", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 100)
		var ids []int64
		for range 40 {
			ids = append(ids, f.create(t, time.Second, item("A", 1)).ID)
		}
		f.clock.Set(Epoch.Add(time.Second))
		var mu sync.Mutex
		closedBy := map[int64]int{}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each closer walks the ids from another place, in batches.
				for i := 0; i < len(ids); i += 8 {
					j := (i + g*10) % len(ids)
					closed, err := f.db.CloseOrders(f.ctx, ids[j:min(j+8, len(ids))])
					if err != nil {
						t.Errorf("CloseOrders: %v", err)
						return
					}
					mu.Lock()
					for _, c := range closed {
						closedBy[c.OrderID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// The walks may miss ids; a last pass closes what is left.
		for _, c := range f.closeOrders(t, ids...) {
			closedBy[c.OrderID]++
		}
		for _, id := range ids {
			if closedBy[id] != 1 {
				t.Errorf("order %d reported closed %d times, want once", id, closedBy[id])
			}
		}
		if got := f.stock(t, "A"); got != [3]int64{100, 0, 0} {
			t.Fatalf("stock %v, want every reservation released once", got)
		}
	})
}

// oversell reserves the scarce SKUs A (100 units) and B (40) from many
// goroutines spread over the store values of fs, and checks that exactly
// the stock was sold: 100 single-A orders, and 40 A+B orders whose failures
// reserved nothing.
func oversell(t *testing.T, fs []storeFixture) {
	t.Helper()
	f := fs[0]
	var (
		wg                 sync.WaitGroup
		created, refused   atomic.Int64
		createdB, refusedB atomic.Int64
	)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := fs[g%len(fs)].db
			for i := range 16 {
				items := []hourglass.Item{item("A", 1)}
				n, r := &created, &refused
				if i%4 == 0 {
					items = []hourglass.Item{item("A", 1), item("B", 1)}
					n, r = &createdB, &refusedB
				}
				_, _, err := db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint(g, "-", i), Items: items, Timeout: time.Minute})
				switch {
				case err == nil:
					n.Add(1)
				case hourglass.ErrorCode(err) == hourglass.CodeInsufficientStock:
					r.Add(1)
				default:
					t.Errorf("CreateOrder: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	// 256 creates: 64 want A+B, 192 want A. A runs out at 100 orders in all.
	total, withB := created.Load()+createdB.Load(), createdB.Load()
	if total != 100 || refused.Load()+refusedB.Load() != 156 {
		t.Fatalf("%d orders created, %d refused; want exactly 100 and 156", total, refused.Load()+refusedB.Load())
	}
	if got := f.stock(t, "A"); got != [3]int64{0, 100, 0} {
		t.Fatalf("A stock %v, want 0 available, 100 reserved", got)
	}
	if got := f.stock(t, "B"); got != [3]int64{40 - withB, withB, 0} || withB > 40 {
		t.Fatalf("B stock %v with %d A+B orders", got, withB)
	}
}

// payAgainstClose races payments (through pay) against a closer (through
// close) that moves the fake clock to the orders' deadline and closes them:
// each order ends paid xor closed, a refused pay is one whose order closed,
// and the stock adds up.
func payAgainstClose(t *testing.T, pay, close storeFixture) {
	t.Helper()
	const n = 60
	pay.product(t, "A", "x", 1000)
	var orders []hourglass.Order
	for range n {
		orders = append(orders, pay.create(t, time.Second, item("A", 2)))
	}
	pay.clock.Set(orders[0].Deadline.Add(-5 * time.Millisecond))
	paid := make([]bool, n)
	closed := map[int64]bool{}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i, o := range orders {
			_, err := pay.db.PayOrder(pay.ctx, o.ID, "p")
			switch {
			case err == nil:
				paid[i] = true
			case hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable:
				t.Errorf("PayOrder: %v", err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		var all []int64
		for _, o := range orders {
			all = append(all, o.ID)
		}
		for i := range 5 {
			if i == 2 {
				close.clock.Set(orders[0].Deadline) // the deadline passes mid-race
			}
			cs, err := close.db.CloseOrders(close.ctx, all)
			if err != nil {
				t.Errorf("CloseOrders: %v", err)
				return
			}
			for _, c := range cs {
				if closed[c.OrderID] {
					t.Errorf("order %d closed twice", c.OrderID)
				}
				closed[c.OrderID] = true
			}
		}
	}()
	wg.Wait()
	// Every order is due now; what the race left pending closes now.
	for _, c := range close.closeOrders(t, ids(orders)...) {
		if closed[c.OrderID] {
			t.Errorf("order %d closed twice", c.OrderID)
		}
		closed[c.OrderID] = true
	}
	var nPaid int64
	for i, o := range orders {
		got := pay.order(t, o.ID)
		switch {
		case paid[i] == closed[o.ID]:
			t.Errorf("order %d: paid %v, closed %v; want exactly one", o.ID, paid[i], closed[o.ID])
		case paid[i] && (got.Status != hourglass.StatePaid || !got.ClosedAt.IsZero()):
			t.Errorf("paid order %d is %+v", o.ID, got)
		case closed[o.ID] && (got.Status != hourglass.StateClosed || !got.PaidAt.IsZero() || got.PaymentID != ""):
			t.Errorf("closed order %d is %+v", o.ID, got)
		}
		if paid[i] {
			nPaid++
		}
	}
	if got := pay.stock(t, "A"); got != [3]int64{1000 - 2*nPaid, 0, 2 * nPaid} {
		t.Fatalf("stock %v after %d paid of %d: want nothing reserved, only the paid sold", got, nPaid, n)
	}
}

// putDuringCreates sets a product's available stock over and over (through
// the first store value) while orders reserve it (through all of them): no
// reservation is lost, and the last put's available stands.
func putDuringCreates(t *testing.T, fs []storeFixture) {
	t.Helper()
	f := fs[0]
	const available, goroutines, each = 1_000_000, 6, 20
	f.product(t, "A", "x", available)
	var wg sync.WaitGroup
	var created atomic.Int64
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := fs[g%len(fs)].db
			for range each {
				if _, _, err := db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Minute}); err != nil {
					t.Errorf("CreateOrder: %v", err)
					return
				}
				created.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 20 {
			if _, err := f.db.PutProduct(f.ctx, hourglass.Product{SKU: "A", Name: fmt.Sprint("v", i), Category: "x", Available: available}); err != nil {
				t.Errorf("PutProduct: %v", err)
				return
			}
		}
	}()
	wg.Wait()
	p, err := f.db.Product(f.ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	if p.Reserved != created.Load() || p.Sold != 0 || p.Name != "v19" {
		t.Fatalf("product %+v after %d creates: want every reservation kept and the last put's name", p, created.Load())
	}
	if p.Available > available || p.Available < available-created.Load() {
		t.Fatalf("available %d, want between %d and %d", p.Available, available-created.Load(), available)
	}
}
