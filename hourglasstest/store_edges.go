package hourglasstest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseEdges covers what is easy to get wrong in a new dialect:
// idempotency keys under concurrency, times truncated to the millisecond,
// and batches larger than a page of parameters.
func exerciseEdges(t *testing.T, h StoreHarness) {
	t.Run("IdempotencyUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 1000)
		idempotentCreates(t, []storeFixture{f})
	})

	t.Run("TimesAreMilliseconds", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 10)
		// Every stored time is unix milliseconds, truncated (not rounded):
		// hourglass.UnixMilli.
		f.clock.Set(Epoch.Add(time.Millisecond + 700*time.Microsecond))
		o := f.create(t, 1500*time.Millisecond, item("A", 1))
		created := Epoch.Add(time.Millisecond)
		if !o.CreatedAt.Equal(created) || !o.Deadline.Equal(created.Add(1500*time.Millisecond)) {
			t.Fatalf("created at %v, deadline %v; want %v and %v (the clock truncated to the ms)", o.CreatedAt, o.Deadline, created, created.Add(1500*time.Millisecond))
		}
		if got := f.order(t, o.ID); !got.CreatedAt.Equal(o.CreatedAt) || !got.Deadline.Equal(o.Deadline) {
			t.Fatalf("Order: created %v, deadline %v; CreateOrder said %v, %v", got.CreatedAt, got.Deadline, o.CreatedAt, o.Deadline)
		}
		// 0.4 ms before the deadline is the millisecond before it: payable.
		f.clock.Set(o.Deadline.Add(-400 * time.Microsecond))
		paid := f.pay(t, o.ID, "p")
		if want := o.Deadline.Add(-time.Millisecond); !paid.PaidAt.Equal(want) || !f.order(t, o.ID).PaidAt.Equal(want) {
			t.Fatalf("paid at %v, want %v", paid.PaidAt, want)
		}
		late := f.create(t, time.Second, item("A", 1))
		f.clock.Set(late.Deadline.Add(999 * time.Microsecond)) // the deadline's millisecond: not payable, due
		_, err := f.db.PayOrder(f.ctx, late.ID, "p")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		closed := f.closeOrders(t, late.ID)
		if len(closed) != 1 || !closed[0].ClosedAt.Equal(late.Deadline) || !f.order(t, late.ID).ClosedAt.Equal(late.Deadline) {
			t.Fatalf("closed %+v, want closed at %v", closed, late.Deadline)
		}
		evs := f.events(t, late.ID)
		if len(evs) != 2 || !evs[0].CreatedAt.Equal(late.CreatedAt) || !evs[1].CreatedAt.Equal(late.Deadline) {
			t.Fatalf("events %+v, want at %v and %v", evs, late.CreatedAt, late.Deadline)
		}
		pending := f.create(t, time.Second, item("A", 1))
		for _, tt := range []struct {
			until time.Time
			want  int
		}{{pending.Deadline.Add(-time.Microsecond), 0}, {pending.Deadline, 1}, {pending.Deadline.Add(999 * time.Microsecond), 1}} {
			if n, err := f.db.CountPendingDue(f.ctx, tt.until, 0); err != nil || n != tt.want {
				t.Errorf("CountPendingDue(deadline%+v) = %d, %v; want %d", tt.until.Sub(pending.Deadline), n, err, tt.want)
			}
			if due, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: tt.until, Limit: 10}); err != nil || len(due) != tt.want {
				t.Errorf("PendingDue(until deadline%+v) = %v, %v; want %d", tt.until.Sub(pending.Deadline), due, err, tt.want)
			}
		}
	})

	t.Run("CloseWithWritesInFlight", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 1_000_000)
		var wg sync.WaitGroup
		var ok atomic.Int64
		started := make(chan struct{}, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					if i == 1 {
						started <- struct{}{}
					}
					// Once closed, writes fail (any error will do); none may hang or panic.
					if _, _, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Minute}); err != nil {
						return
					}
					ok.Add(1)
				}
			}()
		}
		for range 4 {
			<-started
		}
		if err := f.db.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wg.Wait()
		if err := f.db.Close(); err != nil { // idempotent (and the harness closes it once more)
			t.Fatalf("second Close: %v", err)
		}
		if _, err := f.db.PutProduct(f.ctx, hourglass.Product{SKU: "B", Available: 1}); err == nil {
			t.Fatal("a write after Close succeeded")
		}
		if ok.Load() < 4 {
			t.Fatalf("%d creates succeeded before Close, want at least 4", ok.Load())
		}
	})

	t.Run("LargeBatches", func(t *testing.T) {
		t.Parallel()
		f := setupStoreWith(t, h, StoreOptions{Outbox: true})
		const n = 1100 // above the engine's default close batch (512) and relay batch (1000)
		f.product(t, "A", "x", n)
		var (
			mu  sync.Mutex
			all []int64
			wg  sync.WaitGroup
		)
		for g := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += 10 {
					o, _, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Second})
					if err != nil {
						t.Errorf("CreateOrder: %v", err)
						return
					}
					mu.Lock()
					all = append(all, o.ID)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		batch, err := f.db.OutboxBatch(f.ctx, n+10, nil)
		if err != nil || len(batch) != n {
			t.Fatalf("OutboxBatch = %d timers, %v; want %d", len(batch), err, n)
		}
		if err := f.db.OutboxDone(f.ctx, batch); err != nil {
			t.Fatal(err)
		}
		if batch, err := f.db.OutboxBatch(f.ctx, 10, nil); err != nil || len(batch) != 0 {
			t.Fatalf("OutboxBatch after OutboxDone of all = %d, %v", len(batch), err)
		}
		f.clock.Advance(time.Second)
		if due, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: f.clock.Now(), Limit: n}); err != nil || len(due) != n {
			t.Fatalf("PendingDue = %d, %v; want %d", len(due), err, n)
		}
		if closed := f.closeOrders(t, all...); len(closed) != n {
			t.Fatalf("CloseOrders of %d ids closed %d", n, len(closed))
		}
		if got := f.stock(t, "A"); got != [3]int64{n, 0, 0} {
			t.Fatalf("stock %v after closing all", got)
		}
	})
}

// idempotentCreates sends the same idempotent create from many goroutines
// over the store values of fs, and another request with the same key:
// exactly one order is created and reserved, every repeat returns it, and
// the other request is refused with idempotency_key_reused.
func idempotentCreates(t *testing.T, fs []storeFixture) {
	t.Helper()
	f := fs[0]
	const goroutines = 16
	params := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 3)}, Timeout: time.Minute, IdempotencyKey: "race", RequestHash: []byte("h1")}
	other := params
	other.Items, other.RequestHash = []hourglass.Item{item("A", 5)}, []byte("h2")
	var (
		wg              sync.WaitGroup
		created, reused atomic.Int64
		mu              sync.Mutex
		seen            = map[int64]bool{}
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := fs[g%len(fs)].db
			p := params
			if g%4 == 3 {
				p = other
			}
			o, c, err := db.CreateOrder(f.ctx, p)
			switch {
			case err == nil:
				mu.Lock()
				seen[o.ID] = true
				mu.Unlock()
				if c {
					created.Add(1)
				}
			case hourglass.ErrorCode(err) == hourglass.CodeIdempotencyKeyReused:
				reused.Add(1)
			default:
				t.Errorf("CreateOrder: %v", err)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 || len(seen) != 1 {
		t.Fatalf("%d created, orders %v; want exactly one order for the key", created.Load(), seen)
	}
	var id int64
	for k := range seen {
		id = k
	}
	o := f.order(t, id)
	// Whichever request won, the others got its order or a refusal.
	want := int64(3)
	if o.Items[0].Quantity == 5 {
		want = 5
	}
	if got := f.stock(t, "A"); got != [3]int64{1000 - want, want, 0} {
		t.Fatalf("stock %v, want %d reserved once", got, want)
	}
	if want == 3 && reused.Load() != goroutines/4 || want == 5 && reused.Load() != goroutines-goroutines/4 {
		t.Fatalf("%d refused with idempotency_key_reused, want every request with the other hash (order has %d)", reused.Load(), want)
	}
	if got := len(f.events(t, id)); got != 1 {
		t.Fatalf("%d events for the order, want 1", got)
	}
	if all, err := f.db.ListOrders(f.ctx, hourglass.OrderFilter{Limit: 100, Now: f.clock.Now()}); err != nil || len(all) != 1 {
		t.Fatalf("ListOrders = %v, %v; want the one order", ids(all), err)
	}
}
