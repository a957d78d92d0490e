package hourglasstest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// exerciseShared covers two store values on one database (two processes):
// what one commits, the other must see and respect. Skipped for stores
// that cannot be shared (h.OpenShared nil).
func exerciseShared(t *testing.T, h StoreHarness) {
	if h.OpenShared == nil {
		t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
	}
	// setup returns fixtures for the two values, on one fake clock.
	setup := func(t *testing.T) (a, b storeFixture) {
		t.Helper()
		clock := NewClock(Epoch)
		da, db := h.OpenShared(t, StoreOptions{Clock: clock})
		a = storeFixture{ctx: context.Background(), db: da, clock: clock}
		return a, a.on(db)
	}

	t.Run("SiblingsFromClusterReads", func(t *testing.T) {
		t.Parallel()
		// A store value's group commit gathers writes only while its
		// node's cluster reads list another live node (writer.Config.Shared).
		da, db := h.OpenShared(t, StoreOptions{})
		sa, okA := da.(interface{ Shared() bool })
		sb, okB := db.(interface{ Shared() bool })
		ca, okCA := da.(hourglass.ClusterStore)
		cb, okCB := db.(hourglass.ClusterStore)
		if !okA || !okB || !okCA || !okCB {
			t.Skip("store does not tell whether other nodes share its database")
		}
		ctx := context.Background()
		read := func(c hourglass.ClusterStore) {
			t.Helper()
			if _, err := c.ClusterState(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ca.Heartbeat(ctx, hourglass.Node{ID: "sib-a", Addr: "a:1"}); err != nil {
			t.Fatal(err)
		}
		read(ca)
		if sa.Shared() {
			t.Fatal("a's node alone in the cluster, yet a reports its database shared")
		}
		if _, err := cb.Heartbeat(ctx, hourglass.Node{ID: "sib-b", Addr: "b:1"}); err != nil {
			t.Fatal(err)
		}
		if sa.Shared() {
			t.Fatal("a reports its database shared before a cluster read through it listed b")
		}
		read(ca)
		read(cb)
		if !sa.Shared() || !sb.Shared() {
			t.Fatalf("with two live nodes, shared = %v (a), %v (b); want both", sa.Shared(), sb.Shared())
		}
		if err := cb.LeaveCluster(ctx, "sib-b"); err != nil {
			t.Fatal(err)
		}
		read(ca)
		if sa.Shared() {
			t.Fatal("a reports its database shared after b left the cluster")
		}
	})

	t.Run("PolicyFromTheOther", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		a.product(t, "V", "virtual", 10)
		// b reads the policy once before a changes it: no stale copy may stay.
		if o := b.create(t, 0, item("V", 1)); o.Deadline.Sub(o.CreatedAt) != hourglass.DefaultTimeout {
			t.Fatalf("default deadline in %s", o.Deadline.Sub(o.CreatedAt))
		}
		for i, timeout := range []time.Duration{2 * time.Minute, 3 * time.Minute, 4 * time.Minute} {
			if err := a.db.PutPolicy(a.ctx, hourglass.Policy{DefaultTimeout: time.Hour, Categories: map[string]time.Duration{"virtual": timeout}}); err != nil {
				t.Fatal(err)
			}
			if p, err := b.db.Policy(b.ctx); err != nil || p.Categories["virtual"] != timeout {
				t.Fatalf("step %d: b's Policy = %+v, %v; want virtual %s", i, p, err, timeout)
			}
			if o := b.create(t, 0, item("V", 1)); o.Deadline.Sub(o.CreatedAt) != timeout {
				t.Fatalf("step %d: an order created through b has its deadline in %s, want a's policy's %s", i, o.Deadline.Sub(o.CreatedAt), timeout)
			}
		}
	})

	t.Run("ProductsAndOrdersFromTheOther", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		a.product(t, "A", "x", 10)
		o := b.create(t, time.Second, item("A", 4))
		if got := a.order(t, o.ID); !sameOrder(got, o) {
			t.Fatalf("a reads %+v, b created %+v", got, o)
		}
		if got := a.stock(t, "A"); got != [3]int64{6, 4, 0} {
			t.Fatalf("a reads stock %v", got)
		}
		b.clock.Set(o.Deadline)
		if tm, err := a.db.PendingDue(a.ctx, hourglass.PendingDueParams{Until: o.Deadline, Limit: 10}); err != nil || len(tm) != 1 || tm[0].ID != o.ID {
			t.Fatalf("a's PendingDue = %v, %v", tm, err)
		}
		if closed := a.closeOrders(t, o.ID); len(closed) != 1 {
			t.Fatalf("a closed %+v", closed)
		}
		if got := b.order(t, o.ID); got.Status != hourglass.StateClosed {
			t.Fatalf("b reads %+v after a closed it", got)
		}
		if got := b.stock(t, "A"); got != [3]int64{10, 0, 0} {
			t.Fatalf("b reads stock %v", got)
		}
	})

	t.Run("WebhookFromTheOther", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		a.product(t, "A", "x", 10)
		b.create(t, time.Minute, item("A", 1)) // b writes events before any webhook
		w := a.webhook(t, "all", hourglass.EventTypeAll)
		if got, err := b.db.Webhook(b.ctx, w.ID); err != nil || !sameWebhook(got, w) {
			t.Fatalf("b's Webhook = %+v, %v; want %+v", got, err, w)
		}
		o := b.create(t, time.Minute, item("A", 1))
		for _, f := range []storeFixture{a, b} {
			ds := f.pendingDeliveries(t)
			if len(ds) != 1 || ds[0].WebhookID != w.ID || ds[0].OrderID != o.ID || ds[0].URL != w.URL {
				t.Fatalf("deliveries %+v; want one for a's webhook of b's event", ds)
			}
		}
		if _, err := b.db.DeleteWebhook(b.ctx, w.ID); err != nil {
			t.Fatal(err)
		}
		a.create(t, time.Minute, item("A", 1))
		if got := a.deliveryCounts(t); got != [2]int{0, 0} {
			t.Fatalf("DeliveryCounts = %v after b deleted the webhook and a wrote an event", got)
		}
	})

	t.Run("ConcurrentDeliveriesAllDue", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		a.product(t, "A", "x", 10000)
		a.webhook(t, "all", hourglass.EventTypeAll)
		b.webhook(t, "paid", hourglass.EventOrderPaid)
		// Ids handed out before commit need not commit in order: a reader
		// must find every delivery by due time, whichever commits last.
		const goroutines, each = 8, 12
		var wg sync.WaitGroup
		var orders atomic.Int64
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f := []storeFixture{a, b}[g%2]
				for range each {
					o, _, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Minute})
					if err != nil {
						t.Errorf("CreateOrder: %v", err)
						return
					}
					if _, err := []storeFixture{a, b}[(g+1)%2].db.PayOrder(f.ctx, o.ID, "p"); err != nil {
						t.Errorf("PayOrder: %v", err)
						return
					}
					orders.Add(1)
				}
			}()
		}
		wg.Wait()
		want := int(orders.Load()) * 3 // created to all; paid to all and paid
		for _, f := range []storeFixture{a, b} {
			due := f.due(t, a.clock.Now())
			seen := map[int64]bool{}
			for _, d := range due {
				if seen[d.ID] {
					t.Fatalf("delivery %d returned twice", d.ID)
				}
				seen[d.ID] = true
			}
			if len(due) != want {
				t.Fatalf("DueDeliveries returned %d, want all %d", len(due), want)
			}
			if got := f.deliveryCounts(t); got != [2]int{want, 0} {
				t.Fatalf("DeliveryCounts = %v, want %d pending", got, want)
			}
		}
	})

	t.Run("CreatesNeverOversell", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		a.product(t, "A", "x", 100)
		a.product(t, "B", "x", 40)
		oversell(t, []storeFixture{a, b})
	})

	t.Run("IdempotencyAcrossValues", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		a.product(t, "A", "x", 1000)
		idempotentCreates(t, []storeFixture{a, b})
	})

	t.Run("PutProductDuringCreates", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		putDuringCreates(t, []storeFixture{a, b})
	})

	t.Run("PayAgainstCloseAtTheDeadline", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		payAgainstClose(t, a, b)
	})

	t.Run("PayAgainstCloseInRealTime", func(t *testing.T) {
		t.Parallel()
		// The database's own clock decides: no fake clock, a real deadline.
		da, db := h.OpenShared(t, StoreOptions{})
		a := storeFixture{ctx: context.Background(), db: da}
		b := a.on(db)
		a.product(t, "A", "x", 100)
		var orders []hourglass.Order
		for range 20 {
			orders = append(orders, a.create(t, hourglass.MinTimeout, item("A", 1)))
		}
		paid := make([]bool, len(orders))
		closed := map[int64]bool{}
		var wg sync.WaitGroup
		defer wg.Wait() // if the closes below fail the test, b is still paying
		// b pays each order around its own deadline, the first 50 ms before
		// it and each next 5 ms later than the one before (the 20 straddle
		// it: 50 ms before to 45 ms after), whatever the creates' spacing.
		// Deadlines are the database's clock, which may differ a little
		// from ours.
		wg.Go(func() {
			for i, o := range orders {
				if !testenv.Until(t.Context(), o.Deadline.Add(time.Duration(i)*5*time.Millisecond-50*time.Millisecond)) {
					return
				}
				_, err := b.db.PayOrder(b.ctx, o.ID, "p")
				switch {
				case err == nil:
					paid[i] = true
				case hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable:
					t.Errorf("PayOrder: %v", err)
				}
			}
		})
		// Meanwhile a closes them all until none is left pending.
		testenv.EventuallyEvery(t, 10*time.Second, 10*time.Millisecond, "no order left pending", func() bool {
			cs, err := a.db.CloseOrders(a.ctx, ids(orders))
			if err != nil {
				t.Fatalf("CloseOrders: %v", err)
			}
			for _, c := range cs {
				if closed[c.OrderID] {
					t.Errorf("order %d closed twice", c.OrderID)
				}
				closed[c.OrderID] = true
			}
			n, err := a.db.CountPendingDue(a.ctx, farFuture, 0)
			return err == nil && n == 0
		})
		wg.Wait()
		var nPaid int64
		for i, o := range orders {
			if paid[i] == closed[o.ID] {
				t.Errorf("order %d: paid %v, closed %v; want exactly one", o.ID, paid[i], closed[o.ID])
			}
			if paid[i] {
				nPaid++
			}
		}
		if got := b.stock(t, "A"); got != [3]int64{100 - nPaid, 0, nPaid} {
			t.Fatalf("stock %v after %d paid", got, nPaid)
		}
	})

	t.Run("WebhookLimitAcrossValues", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t)
		const goroutines, limit = 16, 5
		var created, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f := []storeFixture{a, b}[g%2]
				p := hourglass.WebhookParams{URL: fmt.Sprint("https://hooks.example.com/", g), Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: webhookSecret}
				_, err := f.db.CreateWebhook(f.ctx, p, limit)
				switch {
				case err == nil:
					created.Add(1)
				case hourglass.ErrorCode(err) == hourglass.CodeLimitExceeded:
					refused.Add(1)
				default:
					t.Errorf("CreateWebhook: %v", err)
				}
			}()
		}
		wg.Wait()
		ws, err := b.db.Webhooks(b.ctx, hourglass.WebhookFilter{Limit: 100})
		if err != nil || len(ws) != limit || created.Load() != limit || refused.Load() != goroutines-limit {
			t.Fatalf("%d webhooks (%v), %d created, %d refused; want exactly %d", len(ws), err, created.Load(), refused.Load(), limit)
		}
	})
}
