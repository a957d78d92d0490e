package hourglasstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseOrders covers products and the order lifecycle: CreateOrder,
// Order, ListOrders, PayOrder, TransitionOrder, CloseOrders, PendingDue.
func exerciseOrders(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) storeFixture { return setupStore(t, h) }

	t.Run("Products", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		if _, err := f.db.Product(f.ctx, "nope"); !errors.Is(err, hourglass.ErrNotFound) {
			t.Fatalf("Product(unknown) = %v, want not_found", err)
		}
		p, err := f.db.PutProduct(f.ctx, hourglass.Product{SKU: "A", Name: "Apple", Category: "fruit", Available: 10})
		if want := (hourglass.Product{SKU: "A", Name: "Apple", Category: "fruit", Available: 10}); err != nil || p != want {
			t.Fatalf("PutProduct(new) = %+v, %v; want %+v", p, err, want)
		}
		f.create(t, time.Minute, item("A", 3))
		f.pay(t, f.create(t, time.Minute, item("A", 2)).ID, "p")
		p, err = f.db.PutProduct(f.ctx, hourglass.Product{SKU: "A", Name: "renamed", Category: "virtual", Available: 50})
		want := hourglass.Product{SKU: "A", Name: "renamed", Category: "virtual", Available: 50, Reserved: 3, Sold: 2}
		if err != nil || p != want {
			t.Fatalf("PutProduct(existing) = %+v, %v; want %+v (available set, reserved and sold kept)", p, err, want)
		}
		if got, err := f.db.Product(f.ctx, "A"); err != nil || got != want {
			t.Fatalf("Product = %+v, %v; want %+v", got, err, want)
		}
		for _, bad := range []hourglass.Product{
			{SKU: "B", Available: -1},
			{SKU: "bad sku", Available: 1},
			{SKU: "", Available: 1},
			{SKU: "B", Name: strings.Repeat("n", 257)},
		} {
			_, err := f.db.PutProduct(f.ctx, bad)
			wantCode(t, err, hourglass.CodeInvalidArgument)
		}
		if _, err := f.db.Product(f.ctx, "B"); !errors.Is(err, hourglass.ErrNotFound) {
			t.Fatalf("a refused PutProduct stored B: %v", err)
		}
	})

	t.Run("CreateReservesAllOrNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 5)
		f.product(t, "B", "x", 1)
		o := f.create(t, 10*time.Second, item("A", 2), item("B", 1))
		want := hourglass.Order{ID: o.ID, UserID: "u1", Status: hourglass.StatePendingPayment, Items: []hourglass.Item{item("A", 2), item("B", 1)},
			CreatedAt: Epoch, Deadline: Epoch.Add(10 * time.Second)}
		if o.ID == 0 || !sameOrder(o, want) {
			t.Fatalf("created %+v, want %+v", o, want)
		}
		if got := f.order(t, o.ID); !sameOrder(got, want) {
			t.Fatalf("Order = %+v, want %+v", got, want)
		}
		if got := f.stock(t, "A"); got != [3]int64{3, 2, 0} {
			t.Fatalf("A stock %v, want 3 available, 2 reserved", got)
		}
		// B is exhausted, then unknown: the whole order fails and A keeps its stock.
		_, _, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1), item("B", 1)}})
		wantCode(t, err, hourglass.CodeInsufficientStock)
		_, _, err = f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1), item("no-such-sku", 1)}})
		wantCode(t, err, hourglass.CodeNotFound)
		if msg := hourglass.ErrorMessage(err); !strings.Contains(msg, "no-such-sku") {
			t.Errorf("unknown SKU message %q does not name it", msg)
		}
		_, _, err = f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 4)}})
		wantCode(t, err, hourglass.CodeInsufficientStock)
		if got := f.stock(t, "A"); got != [3]int64{3, 2, 0} {
			t.Fatalf("A stock after refused orders %v, want unchanged", got)
		}
		if got := f.stock(t, "B"); got != [3]int64{0, 1, 0} {
			t.Fatalf("B stock after refused orders %v, want unchanged", got)
		}
		all, err := f.db.ListOrders(f.ctx, hourglass.OrderFilter{Limit: 10, Now: f.clock.Now()})
		if err != nil || !slices.Equal(ids(all), []int64{o.ID}) {
			t.Fatalf("orders after refused creates: %v, %v; want only %d", ids(all), err, o.ID)
		}
		if _, err := f.db.Order(f.ctx, o.ID+1000); !errors.Is(err, hourglass.ErrNotFound) {
			t.Fatalf("Order(unknown) = %v, want not_found", err)
		}
		// Exactly the available stock is enough.
		f.create(t, time.Minute, item("A", 3))
		if got := f.stock(t, "A"); got != [3]int64{0, 5, 0} {
			t.Fatalf("A stock %v after taking the last 3", got)
		}
	})

	t.Run("CreateValidation", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 1000)
		many := make([]hourglass.Item, hourglass.MaxItemsPerOrder+1)
		for i := range many {
			many[i] = item(fmt.Sprint("S", i), 1)
		}
		one := []hourglass.Item{item("A", 1)}
		for _, tt := range []struct {
			name string
			p    hourglass.CreateOrderParams
		}{
			{"no user", hourglass.CreateOrderParams{Items: one}},
			{"long user", hourglass.CreateOrderParams{UserID: strings.Repeat("u", hourglass.MaxUserIDLength+1), Items: one}},
			{"no items", hourglass.CreateOrderParams{UserID: "u"}},
			{"too many items", hourglass.CreateOrderParams{UserID: "u", Items: many}},
			{"zero quantity", hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 0)}}},
			{"negative quantity", hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", -1)}}},
			{"quantity too large", hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", hourglass.MaxQuantity+1)}}},
			{"bad sku", hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A;drop", 1)}}},
			{"sku twice", hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1), item("A", 2)}}},
			{"timeout too short", hourglass.CreateOrderParams{UserID: "u", Items: one, Timeout: hourglass.MinTimeout - time.Millisecond}},
			{"timeout too long", hourglass.CreateOrderParams{UserID: "u", Items: one, Timeout: hourglass.MaxTimeout + time.Millisecond}},
			{"negative timeout", hourglass.CreateOrderParams{UserID: "u", Items: one, Timeout: -time.Minute}},
		} {
			_, created, err := f.db.CreateOrder(f.ctx, tt.p)
			if hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument || created {
				t.Errorf("%s: created=%v, %v; want invalid_argument", tt.name, created, err)
			}
		}
		if got := f.stock(t, "A"); got != [3]int64{1000, 0, 0} {
			t.Fatalf("stock %v after invalid creates, want untouched", got)
		}
		if all, err := f.db.ListOrders(f.ctx, hourglass.OrderFilter{Limit: 10, Now: f.clock.Now()}); err != nil || len(all) != 0 {
			t.Fatalf("orders after invalid creates: %v, %v", ids(all), err)
		}
		// The bounds themselves are valid.
		for _, timeout := range []time.Duration{hourglass.MinTimeout, hourglass.MaxTimeout} {
			o := f.create(t, timeout, item("A", 1))
			if got := o.Deadline.Sub(o.CreatedAt); got != timeout {
				t.Errorf("timeout %s: deadline - created = %s", timeout, got)
			}
		}
		f.product(t, "B", "x", hourglass.MaxQuantity)
		f.create(t, time.Minute, item("B", hourglass.MaxQuantity))
	})

	t.Run("Idempotency", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 10)
		params := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 2)}, Timeout: time.Minute, IdempotencyKey: "k1", RequestHash: []byte("h1")}
		first, created, err := f.db.CreateOrder(f.ctx, params)
		if err != nil || !created {
			t.Fatalf("first create: created=%v, %v", created, err)
		}
		f.clock.Advance(time.Second)
		again, created, err := f.db.CreateOrder(f.ctx, params)
		if err != nil || created || !sameOrder(again, first) {
			t.Fatalf("repeat: %+v created=%v err=%v; want the first order %+v", again, created, err, first)
		}
		other := params
		other.RequestHash = []byte("h2")
		_, created, err = f.db.CreateOrder(f.ctx, other)
		wantCode(t, err, hourglass.CodeIdempotencyKeyReused)
		if created {
			t.Fatal("created=true with an error")
		}
		// After the order moved on, the repeat still returns it.
		paid := f.pay(t, first.ID, "p")
		again, created, err = f.db.CreateOrder(f.ctx, params)
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("repeat after pay: %+v created=%v err=%v", again, created, err)
		}
		if !sameOrder(again, paid) && !sameOrder(again, first) {
			t.Errorf("repeat after pay returned %+v, neither the order as created nor as stored", again)
		}
		if got := f.stock(t, "A"); got != [3]int64{8, 0, 2} {
			t.Fatalf("stock %v, want reserved (then sold) once", got)
		}
		if got := eventTypes(f.events(t, first.ID)); !slices.Equal(got, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid}) {
			t.Fatalf("events %v: a repeat wrote an event", got)
		}
		// A refused create does not take its key.
		refused := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 9)}, IdempotencyKey: "k2", RequestHash: []byte("big")}
		_, _, err = f.db.CreateOrder(f.ctx, refused)
		wantCode(t, err, hourglass.CodeInsufficientStock)
		retry := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Minute, IdempotencyKey: "k2", RequestHash: []byte("small")}
		if o, created, err := f.db.CreateOrder(f.ctx, retry); err != nil || !created || o.ID == first.ID {
			t.Fatalf("create with the key of a refused create: %+v created=%v, %v", o, created, err)
		}
		// Keys are independent of each other; no key means no idempotency.
		noKey := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Minute}
		a, _, errA := f.db.CreateOrder(f.ctx, noKey)
		b, _, errB := f.db.CreateOrder(f.ctx, noKey)
		if errA != nil || errB != nil || a.ID == b.ID {
			t.Fatalf("two creates without a key: %d, %d, %v, %v; want two orders", a.ID, b.ID, errA, errB)
		}
	})

	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		f := storeFixture{ctx: context.Background(), db: h.Open(t, StoreOptions{})}
		f.product(t, "A", "x", 10)
		before := time.Now()
		o := f.create(t, time.Hour, item("A", 1))
		// The database's clock may be another machine's: allow some skew.
		if d := o.CreatedAt.Sub(before); d < -time.Minute || d > time.Minute {
			t.Fatalf("created at %v with the database's own clock; the process says %v", o.CreatedAt, before)
		}
		if d := o.Deadline.Sub(o.CreatedAt); d != time.Hour {
			t.Fatalf("deadline - created = %s, want 1h", d)
		}
		p := f.pay(t, o.ID, "p")
		if p.Status != hourglass.StatePaid || p.PaidAt.Before(o.CreatedAt) || !p.PaidAt.Before(o.Deadline) {
			t.Fatalf("paid %+v", p)
		}
		// The database's now is stored in milliseconds too.
		for _, tm := range []time.Time{o.CreatedAt, o.Deadline, p.PaidAt, f.order(t, o.ID).CreatedAt, f.order(t, o.ID).PaidAt} {
			if !tm.Equal(ms(tm)) {
				t.Errorf("time %v has a part below the millisecond", tm)
			}
		}
	})

	t.Run("ListOrders", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 100)
		short := f.create(t, time.Second, item("A", 1))
		closed := f.create(t, time.Second, item("A", 1))
		long := f.create(t, time.Hour, item("A", 1))
		paid := f.create(t, time.Hour, item("A", 1))
		f.pay(t, paid.ID, "p1")
		shipped := f.create(t, time.Hour, item("A", 1))
		f.pay(t, shipped.ID, "p2")
		f.transition(t, shipped.ID, hourglass.ActionShip)
		completed := f.create(t, time.Hour, item("A", 1))
		f.pay(t, completed.ID, "p3")
		f.transition(t, completed.ID, hourglass.ActionShip)
		f.transition(t, completed.ID, hourglass.ActionComplete)
		cancelled := f.create(t, time.Hour, item("A", 1))
		f.transition(t, cancelled.ID, hourglass.ActionCancel)
		f.clock.Set(short.Deadline) // short is due, not closed; closed is closed
		if got := f.closeOrders(t, closed.ID); len(got) != 1 {
			t.Fatalf("close: %+v", got)
		}
		now := f.clock.Now()
		all := []int64{short.ID, closed.ID, long.ID, paid.ID, shipped.ID, completed.ID, cancelled.ID}
		for _, tt := range []struct {
			status hourglass.State
			now    time.Time
			want   []int64
		}{
			{"", now, all},
			{hourglass.StatePendingPayment, now, []int64{long.ID}},
			{hourglass.StateClosed, now, []int64{short.ID, closed.ID}},
			{hourglass.StatePaid, now, []int64{paid.ID}},
			{hourglass.StateShipped, now, []int64{shipped.ID}},
			{hourglass.StateCompleted, now, []int64{completed.ID}},
			{hourglass.StateCancelled, now, []int64{cancelled.ID}},
			// A millisecond before its deadline, short is still pending.
			{hourglass.StatePendingPayment, now.Add(-time.Millisecond), []int64{short.ID, long.ID}},
			{hourglass.StateClosed, now.Add(-time.Millisecond), []int64{closed.ID}},
		} {
			got, err := f.db.ListOrders(f.ctx, hourglass.OrderFilter{Status: tt.status, Limit: 100, Now: tt.now})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Errorf("status %q at deadline%+v: %v, want %v", tt.status, tt.now.Sub(now), ids(got), tt.want)
			}
			for _, o := range got {
				if want := f.order(t, o.ID); !sameOrder(o, want) {
					t.Errorf("listed %+v, Order says %+v", o, want)
				}
			}
		}
		for _, tt := range []struct {
			status hourglass.State
			want   []int64
		}{{"", all}, {hourglass.StateClosed, []int64{short.ID, closed.ID}}} {
			var got []int64
			for after, n := int64(0), 0; ; n++ {
				if n > maxPages {
					t.Fatalf("ListOrders paging does not end: the cursor does not advance")
				}
				page, err := f.db.ListOrders(f.ctx, hourglass.OrderFilter{Status: tt.status, After: after, Limit: 2, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > 2 {
					t.Fatalf("limit 2 returned %d", len(page))
				}
				got = append(got, ids(page)...)
				if len(page) < 2 {
					break
				}
				after = page[len(page)-1].ID
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("status %q paged by 2: %v, want %v", tt.status, got, tt.want)
			}
		}
	})

	t.Run("PayAtTheBoundary", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 10)
		early := f.create(t, time.Second, item("A", 1))
		late := f.create(t, time.Second, item("A", 1))
		f.clock.Set(early.Deadline.Add(-time.Millisecond))
		paid, err := f.db.PayOrder(f.ctx, early.ID, "pay-1")
		want := early
		want.Status, want.PaymentID, want.PaidAt = hourglass.StatePaid, "pay-1", f.clock.Now()
		if err != nil || !sameOrder(paid, want) {
			t.Fatalf("pay 1ms before the deadline: %+v, %v; want %+v", paid, err, want)
		}
		if got := f.order(t, early.ID); !sameOrder(got, want) {
			t.Fatalf("Order after pay = %+v, want %+v", got, want)
		}
		f.clock.Set(late.Deadline) // exactly at the deadline: not payable
		_, err = f.db.PayOrder(f.ctx, late.ID, "pay-2")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		f.clock.Advance(time.Hour)
		_, err = f.db.PayOrder(f.ctx, late.ID, "pay-2")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		if got := f.order(t, late.ID); got.Status != hourglass.StatePendingPayment || got.PaymentID != "" || !got.PaidAt.IsZero() {
			t.Fatalf("a refused pay changed the order: %+v", got)
		}
		// A repeat with the same payment id is idempotent, even after the deadline.
		again, err := f.db.PayOrder(f.ctx, early.ID, "pay-1")
		if err != nil || !sameOrder(again, want) {
			t.Fatalf("repeat payment with the same id: %+v, %v; want %+v", again, err, want)
		}
		_, err = f.db.PayOrder(f.ctx, early.ID, "pay-other")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		_, err = f.db.PayOrder(f.ctx, 999999, "p")
		wantCode(t, err, hourglass.CodeNotFound)
		_, err = f.db.PayOrder(f.ctx, early.ID, "")
		wantCode(t, err, hourglass.CodeInvalidArgument)
		if got := f.stock(t, "A"); got != [3]int64{8, 1, 1} {
			t.Fatalf("stock %v, want 8 available, 1 reserved (late, unclosed), 1 sold", got)
		}
		if got := eventTypes(f.events(t, early.ID)); !slices.Equal(got, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid}) {
			t.Fatalf("events of the paid order: %v", got)
		}
		// Cancelled and closed orders are not payable.
		f.clock.Set(Epoch)
		c := f.create(t, time.Minute, item("A", 1))
		f.transition(t, c.ID, hourglass.ActionCancel)
		_, err = f.db.PayOrder(f.ctx, c.ID, "p")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		f.clock.Set(late.Deadline)
		f.closeOrders(t, late.ID)
		_, err = f.db.PayOrder(f.ctx, late.ID, "pay-2")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
	})

	t.Run("Transitions", func(t *testing.T) {
		t.Parallel()
		// orderIn returns an order of 2 A (of 10) brought into a state.
		orderIn := func(t *testing.T, f storeFixture, st hourglass.State) hourglass.Order {
			t.Helper()
			f.product(t, "A", "x", 10)
			if st == hourglass.StateClosed {
				o := f.create(t, time.Second, item("A", 2))
				f.clock.Set(o.Deadline)
				f.closeOrders(t, o.ID)
				return f.order(t, o.ID)
			}
			o := f.create(t, time.Minute, item("A", 2))
			path := map[hourglass.State][]hourglass.Action{
				hourglass.StatePaid:      nil,
				hourglass.StateShipped:   {hourglass.ActionShip},
				hourglass.StateCompleted: {hourglass.ActionShip, hourglass.ActionComplete},
			}
			switch st {
			case hourglass.StatePendingPayment:
			case hourglass.StateCancelled:
				f.transition(t, o.ID, hourglass.ActionCancel)
			default:
				f.pay(t, o.ID, "p")
				for _, a := range path[st] {
					f.transition(t, o.ID, a)
				}
			}
			o = f.order(t, o.ID)
			if o.Status != st {
				t.Fatalf("setup: order is %s, want %s", o.Status, st)
			}
			return o
		}
		for _, st := range hourglass.States() {
			for _, a := range []hourglass.Action{hourglass.ActionCancel, hourglass.ActionShip, hourglass.ActionComplete} {
				t.Run(fmt.Sprintf("%s/%s", st, a), func(t *testing.T) {
					t.Parallel()
					f := setup(t)
					o := orderIn(t, f, st)
					stockBefore, eventsBefore := f.stock(t, "A"), f.events(t, o.ID)
					from, to, err := a.Transition()
					if err != nil {
						t.Fatal(err)
					}
					got, err := f.db.TransitionOrder(f.ctx, o.ID, a)
					if st != from || !st.CanTransitionTo(to) {
						wantCode(t, err, hourglass.CodeInvalidTransition)
						if now := f.order(t, o.ID); !sameOrder(now, o) {
							t.Fatalf("refused %s changed the order: %+v, was %+v", a, now, o)
						}
						if now := f.stock(t, "A"); now != stockBefore {
							t.Fatalf("refused %s moved stock: %v, was %v", a, now, stockBefore)
						}
						if evs := f.events(t, o.ID); len(evs) != len(eventsBefore) {
							t.Fatalf("refused %s wrote an event: %v", a, eventTypes(evs))
						}
						return
					}
					want := o
					want.Status = to
					if err != nil || !sameOrder(got, want) {
						t.Fatalf("%s: %+v, %v; want %+v", a, got, err, want)
					}
					if now := f.order(t, o.ID); !sameOrder(now, want) {
						t.Fatalf("Order after %s = %+v, want %+v", a, now, want)
					}
					wantStock := stockBefore
					if to == hourglass.StateCancelled {
						wantStock = [3]int64{10, 0, 0}
					}
					if now := f.stock(t, "A"); now != wantStock {
						t.Fatalf("stock after %s: %v, want %v", a, now, wantStock)
					}
					evs := f.events(t, o.ID)
					if len(evs) != len(eventsBefore)+1 || evs[len(evs)-1].Type != hourglass.EventFor(to) {
						t.Fatalf("events after %s: %v, want one more, %s", a, eventTypes(evs), hourglass.EventFor(to))
					}
					// The same action again is refused: the state moved on.
					_, err = f.db.TransitionOrder(f.ctx, o.ID, a)
					wantCode(t, err, hourglass.CodeInvalidTransition)
				})
			}
		}
	})

	t.Run("CancelAtTheDeadline", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 10)
		early := f.create(t, time.Second, item("A", 1))
		late := f.create(t, time.Second, item("A", 2))
		f.clock.Set(early.Deadline.Add(-time.Millisecond))
		f.transition(t, early.ID, hourglass.ActionCancel)
		f.clock.Set(late.Deadline)
		_, err := f.db.TransitionOrder(f.ctx, late.ID, hourglass.ActionCancel)
		wantCode(t, err, hourglass.CodeInvalidTransition)
		f.clock.Advance(time.Minute)
		_, err = f.db.TransitionOrder(f.ctx, late.ID, hourglass.ActionCancel)
		wantCode(t, err, hourglass.CodeInvalidTransition)
		if got := f.order(t, late.ID); got.Status != hourglass.StatePendingPayment {
			t.Fatalf("refused cancel changed the order: %+v", got)
		}
		if got := f.stock(t, "A"); got != [3]int64{8, 2, 0} {
			t.Fatalf("stock %v: want the cancel's 1 released, the late order's 2 still reserved", got)
		}
		_, err = f.db.TransitionOrder(f.ctx, 999999, hourglass.ActionCancel)
		wantCode(t, err, hourglass.CodeNotFound)
		if _, err := f.db.TransitionOrder(f.ctx, late.ID, hourglass.Action("refund")); err == nil {
			t.Fatal("unknown action accepted")
		}
	})

	t.Run("CloseOrders", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 10)
		a := f.create(t, time.Second, item("A", 2))
		b := f.create(t, time.Second, item("A", 3))
		c := f.create(t, 5*time.Second, item("A", 1))
		d := f.create(t, time.Second, item("A", 1))
		f.pay(t, b.ID, "p")
		f.transition(t, d.ID, hourglass.ActionCancel)
		if closed := f.closeOrders(t); len(closed) != 0 {
			t.Fatalf("close of no ids: %+v", closed)
		}
		f.clock.Set(a.Deadline.Add(-time.Millisecond))
		if closed := f.closeOrders(t, a.ID, b.ID, c.ID); len(closed) != 0 {
			t.Fatalf("close before any deadline: %+v; want nothing closed", closed)
		}
		f.clock.Set(a.Deadline.Add(3 * time.Millisecond))
		closed := f.closeOrders(t, a.ID, b.ID, c.ID, d.ID, 424242)
		if want := (hourglass.ClosedOrder{OrderID: a.ID, Deadline: a.Deadline, ClosedAt: f.clock.Now()}); len(closed) != 1 ||
			closed[0].OrderID != want.OrderID || !closed[0].Deadline.Equal(want.Deadline) || !closed[0].ClosedAt.Equal(want.ClosedAt) {
			t.Fatalf("close = %+v; want only %+v", closed, want)
		}
		closedAt := f.clock.Now()
		for range 3 {
			f.clock.Advance(time.Second)
			if closed := f.closeOrders(t, a.ID, a.ID); len(closed) != 0 {
				t.Fatalf("repeat close = %+v; want a no-op", closed)
			}
		}
		if got := f.stock(t, "A"); got != [3]int64{6, 1, 3} {
			t.Fatalf("stock %v, want released exactly once", got)
		}
		want := a
		want.Status, want.CloseReason, want.ClosedAt = hourglass.StateClosed, hourglass.CloseReasonTimeout, closedAt
		if got := f.order(t, a.ID); !sameOrder(got, want) {
			t.Fatalf("closed order %+v, want %+v", got, want)
		}
		if got := eventTypes(f.events(t, a.ID)); !slices.Equal(got, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderClosed}) {
			t.Fatalf("events of the closed order: %v", got)
		}
		_, err := f.db.PayOrder(f.ctx, a.ID, "p")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		// A duplicate id in one call closes its order once.
		f.clock.Set(c.Deadline)
		closed = f.closeOrders(t, c.ID, c.ID)
		if len(closed) != 1 || closed[0].OrderID != c.ID {
			t.Fatalf("close of a duplicated id = %+v", closed)
		}
		if got := f.stock(t, "A"); got != [3]int64{7, 0, 3} {
			t.Fatalf("stock %v after closing c", got)
		}
	})

	t.Run("PendingDuePages", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 1000)
		until := Epoch.Add(4 * time.Second) // excludes the 5 s ones
		var want []hourglass.DueItem
		for i := range 30 {
			// Deadlines repeat every 5 orders, so paging must break ties by id.
			o := f.create(t, time.Duration(1+i%5)*time.Second, item("A", 1))
			switch i % 7 {
			case 3:
				f.pay(t, o.ID, "p")
				continue
			case 5:
				f.transition(t, o.ID, hourglass.ActionCancel)
				continue
			}
			if !o.Deadline.After(until) {
				want = append(want, hourglass.DueItem{ID: o.ID, At: o.Deadline})
			}
		}
		slices.SortFunc(want, func(a, b hourglass.DueItem) int {
			if timerBefore(a.At, a.ID, b.At, b.ID) {
				return -1
			}
			return 1
		})
		for _, limit := range []int{1, 4, 5, 100} {
			var got []hourglass.DueItem
			p := hourglass.PendingDueParams{Until: until, Limit: limit} // the zero cursor starts at the beginning
			for n := 0; ; n++ {
				if n > maxPages {
					t.Fatalf("PendingDue paging does not end: the cursor does not advance")
				}
				page, err := f.db.PendingDue(f.ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("limit %d: a page of %d", limit, len(page))
				}
				got = append(got, page...)
				if len(page) < limit {
					break
				}
				p.After, p.AfterID = page[len(page)-1].At, page[len(page)-1].ID
			}
			if !sameTimers(got, want) {
				t.Errorf("limit %d: paged\n%v\nwant\n%v", limit, got, want)
			}
		}
		// A closed order is no longer pending.
		f.clock.Set(until)
		f.closeOrders(t, want[0].ID)
		page, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: until, Limit: 1})
		if err != nil || !sameTimers(page, want[1:2]) {
			t.Fatalf("after closing the first: %v, %v; want %v", page, err, want[1])
		}
		if page, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: Epoch, Limit: 10}); err != nil || len(page) != 0 {
			t.Fatalf("until before every deadline: %v, %v", page, err)
		}
	})
}
