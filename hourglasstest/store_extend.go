package hourglasstest

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseExtend covers ExtendOrder (the API's extension and the payment
// check's, past the deadline) and PayDueOrder (the payment check's pay).
func exerciseExtend(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) storeFixture {
		f := setupStore(t, h)
		f.product(t, "A", "x", 10)
		return f
	}
	extend := func(t *testing.T, f storeFixture, p hourglass.ExtendOrderParams) hourglass.Order {
		t.Helper()
		o, err := f.db.ExtendOrder(f.ctx, p)
		if err != nil {
			t.Fatalf("ExtendOrder(%+v): %v", p, err)
		}
		return o
	}
	// extendedDeadlines returns the deadline each order.extended event of
	// the order shows, in order, and checks the other events' types.
	extendedDeadlines := func(t *testing.T, f storeFixture, id int64) []string {
		t.Helper()
		var out []string
		for _, e := range f.events(t, id) {
			if e.Type != hourglass.EventOrderExtended {
				continue
			}
			var body struct {
				Type  string `json:"type"`
				Order struct {
					Status   string `json:"status"`
					Deadline string `json:"deadline"`
				} `json:"order"`
			}
			if err := json.Unmarshal(e.Body, &body); err != nil {
				t.Fatalf("order.extended body %s: %v", e.Body, err)
			}
			if body.Type != string(hourglass.EventOrderExtended) || body.Order.Status != string(hourglass.StatePendingPayment) {
				t.Fatalf("order.extended body %s: want type order.extended, status pending_payment", e.Body)
			}
			out = append(out, body.Order.Deadline)
		}
		return out
	}
	ms := func(d time.Duration) string { return Epoch.Add(d).Format(hourglass.TimeFormat) }

	t.Run("Extend", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		o := f.create(t, 10*time.Second, item("A", 2))
		var (
			mu   sync.Mutex
			seen []hourglass.DueItem
		)
		if feed, ok := f.db.(hourglass.DueFeed); ok {
			ctx, cancel := context.WithCancel(f.ctx)
			wait := feed.WatchDue(ctx, func(u hourglass.DueUpdate) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, u.Due...)
			})
			t.Cleanup(func() { cancel(); wait() })
		}
		f.clock.Advance(5 * time.Second)
		got := extend(t, f, hourglass.ExtendOrderParams{ID: o.ID, Deadline: Epoch.Add(30 * time.Second)})
		want := o
		want.Deadline = Epoch.Add(30 * time.Second)
		if !sameOrder(got, want) {
			t.Fatalf("ExtendOrder = %+v, want %+v", got, want)
		}
		if stored := f.order(t, o.ID); !sameOrder(stored, want) {
			t.Fatalf("Order after the extension = %+v, want %+v", stored, want)
		}
		got = extend(t, f, hourglass.ExtendOrderParams{ID: o.ID, By: 10 * time.Second})
		if !got.Deadline.Equal(Epoch.Add(40 * time.Second)) {
			t.Fatalf("extend_ms 10000 from 30 s: deadline %v, want %v", got.Deadline, Epoch.Add(40*time.Second))
		}
		// A repeat of the extension to 40 s: the order as it is, no event.
		if again := extend(t, f, hourglass.ExtendOrderParams{ID: o.ID, Deadline: Epoch.Add(40 * time.Second)}); !sameOrder(again, got) {
			t.Fatalf("repeat = %+v, want %+v", again, got)
		}
		// Each event shows the deadline it set, even after the later one.
		if d := extendedDeadlines(t, f, o.ID); !slices.Equal(d, []string{ms(30 * time.Second), ms(40 * time.Second)}) {
			t.Fatalf("order.extended deadlines %v, want 30 s then 40 s", d)
		}
		if got := f.stock(t, "A"); got != [3]int64{8, 2, 0} {
			t.Fatalf("stock %v after extensions, want 8 available, 2 reserved", got)
		}
		// The old deadline closes nothing; the new one does.
		f.clock.Set(Epoch.Add(10 * time.Second))
		if closed := f.closeOrders(t, o.ID); len(closed) != 0 {
			t.Fatalf("CloseOrders at the old deadline closed %+v", closed)
		}
		due, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: farFuture, Limit: 10})
		if err != nil || !slices.Equal(due, []hourglass.DueItem{{ID: o.ID, At: Epoch.Add(40 * time.Second)}}) {
			t.Fatalf("PendingDue = %+v, %v; want the new deadline", due, err)
		}
		f.clock.Set(Epoch.Add(40 * time.Second))
		closed := f.closeOrders(t, o.ID)
		if len(closed) != 1 || !closed[0].Deadline.Equal(Epoch.Add(40*time.Second)) {
			t.Fatalf("CloseOrders at the new deadline = %+v, want order %d, deadline 40 s", closed, o.ID)
		}
		if _, ok := f.db.(hourglass.DueFeed); ok {
			mu.Lock()
			defer mu.Unlock()
			if !slices.Contains(seen, hourglass.DueItem{ID: o.ID, At: Epoch.Add(40 * time.Second)}) ||
				!slices.Contains(seen, hourglass.DueItem{ID: o.ID, At: Epoch.Add(30 * time.Second)}) {
				t.Fatalf("due feed announced %+v; want both new deadlines", seen)
			}
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		o := f.create(t, 10*time.Second, item("A", 1))
		for _, tt := range []struct {
			name string
			p    hourglass.ExtendOrderParams
			code hourglass.Code
		}{
			{"neither", hourglass.ExtendOrderParams{ID: o.ID}, hourglass.CodeInvalidArgument},
			{"both", hourglass.ExtendOrderParams{ID: o.ID, Deadline: Epoch.Add(time.Minute), By: time.Second}, hourglass.CodeInvalidArgument},
			{"negative", hourglass.ExtendOrderParams{ID: o.ID, By: -time.Second}, hourglass.CodeInvalidArgument},
			{"not later", hourglass.ExtendOrderParams{ID: o.ID, Deadline: Epoch.Add(5 * time.Second)}, hourglass.CodeInvalidArgument},
			{"too far", hourglass.ExtendOrderParams{ID: o.ID, Deadline: Epoch.Add(hourglass.MaxOrderLifetime + time.Millisecond)}, hourglass.CodeInvalidArgument},
			{"unknown", hourglass.ExtendOrderParams{ID: o.ID + 1000, Deadline: Epoch.Add(time.Minute)}, hourglass.CodeNotFound},
		} {
			_, err := f.db.ExtendOrder(f.ctx, tt.p)
			if hourglass.ErrorCode(err) != tt.code {
				t.Errorf("%s: ExtendOrder = %v, want %s", tt.name, err, tt.code)
			}
		}
		// Exactly 7 days after creation is allowed.
		extend(t, f, hourglass.ExtendOrderParams{ID: o.ID, Deadline: Epoch.Add(hourglass.MaxOrderLifetime)})
		if d := extendedDeadlines(t, f, o.ID); len(d) != 1 {
			t.Fatalf("order.extended events %v after refusals and one extension, want one", d)
		}
		// Paid: not pending.
		paid := f.pay(t, f.create(t, 10*time.Second, item("A", 1)).ID, "p")
		_, err := f.db.ExtendOrder(f.ctx, hourglass.ExtendOrderParams{ID: paid.ID, Deadline: Epoch.Add(time.Minute)})
		wantCode(t, err, hourglass.CodeInvalidTransition)
		_, err = f.db.ExtendOrder(f.ctx, hourglass.ExtendOrderParams{ID: paid.ID, Deadline: Epoch.Add(time.Minute), Overdue: true})
		wantCode(t, err, hourglass.CodeInvalidTransition)
		// At its deadline the order belongs to the closer, unless the
		// payment check extends it (and then to a time after now).
		late := f.create(t, 10*time.Second, item("A", 1))
		f.clock.Set(late.Deadline)
		_, err = f.db.ExtendOrder(f.ctx, hourglass.ExtendOrderParams{ID: late.ID, Deadline: Epoch.Add(time.Minute)})
		wantCode(t, err, hourglass.CodeInvalidTransition)
		_, err = f.db.ExtendOrder(f.ctx, hourglass.ExtendOrderParams{ID: late.ID, By: 0, Deadline: late.Deadline.Add(-time.Millisecond), Overdue: true})
		wantCode(t, err, hourglass.CodeInvalidArgument) // not later than its deadline
		got := extend(t, f, hourglass.ExtendOrderParams{ID: late.ID, Deadline: Epoch.Add(time.Minute), Overdue: true})
		if !got.Deadline.Equal(Epoch.Add(time.Minute)) || got.Status != hourglass.StatePendingPayment {
			t.Fatalf("extension by the check = %+v, want pending until 1 min", got)
		}
		if closed := f.closeOrders(t, late.ID); len(closed) != 0 {
			t.Fatalf("CloseOrders after the check's extension closed %+v", closed)
		}
		// Closed: refused, by the check too.
		f.clock.Set(Epoch.Add(time.Minute))
		f.closeOrders(t, late.ID)
		_, err = f.db.ExtendOrder(f.ctx, hourglass.ExtendOrderParams{ID: late.ID, Deadline: Epoch.Add(2 * time.Minute), Overdue: true})
		wantCode(t, err, hourglass.CodeInvalidTransition)
	})

	t.Run("Outbox", func(t *testing.T) {
		t.Parallel()
		f := setupStoreWith(t, h, StoreOptions{Outbox: true})
		f.product(t, "A", "x", 10)
		ob, ok := f.db.(hourglass.Outbox)
		if !ok {
			t.Skip("the store has no outbox")
		}
		o := f.create(t, 10*time.Second, item("A", 1))
		batch, err := ob.OutboxBatch(f.ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.OutboxDone(f.ctx, batch); err != nil {
			t.Fatal(err)
		}
		extend(t, f, hourglass.ExtendOrderParams{ID: o.ID, Deadline: Epoch.Add(time.Minute)})
		batch, err = ob.OutboxBatch(f.ctx, 10, nil)
		if err != nil || !slices.Equal(batch, []hourglass.DueItem{{ID: o.ID, At: Epoch.Add(time.Minute)}}) {
			t.Fatalf("outbox after the extension = %+v, %v; want the new deadline", batch, err)
		}
	})

	// Another store value on the same database (another node) hears of an
	// extension as it hears of a create: its new deadline, on WatchCreated.
	t.Run("SharedAnnounce", func(t *testing.T) {
		t.Parallel()
		if h.OpenShared == nil {
			t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
		}
		da, db := h.OpenShared(t, StoreOptions{})
		a, ok := da.(hourglass.ClusterStore)
		if !ok {
			t.Skip("store does not implement hourglass.ClusterStore")
		}
		fb := storeFixture{ctx: context.Background(), db: db}
		fb.product(t, "W", "x", 1000)
		wctx, cancel := context.WithCancel(fb.ctx)
		defer cancel()
		seen := make(chan hourglass.DueItem, 1000)
		done := make(chan error, 1)
		go func() {
			done <- a.WatchCreated(wctx, func(ts []hourglass.DueItem) {
				for _, t := range ts {
					seen <- t
				}
			})
		}()
		// The watch may take a moment to start: create until one is seen.
		// Any of them counts: under load the watch may report each order
		// only after the next was created.
		giveUp := time.After(10 * time.Second)
		created := map[int64]hourglass.Order{}
		var o hourglass.Order
		for started := false; !started; {
			c := fb.create(t, time.Hour, item("W", 1))
			created[c.ID] = c
			wait := time.After(200 * time.Millisecond)
			for waiting := true; waiting && !started; {
				select {
				case got := <-seen:
					o, started = created[got.ID]
				case <-wait:
					waiting = false
				case <-giveUp:
					t.Fatalf("WatchCreated reported none of the %d orders created through the other store value within 10s", len(created))
				}
			}
		}
		got, err := fb.db.ExtendOrder(fb.ctx, hourglass.ExtendOrderParams{ID: o.ID, By: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case ts := <-seen:
				if ts.ID == o.ID && ts.At.Equal(got.Deadline) {
					cancel()
					<-done
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the extension of order %d to %v was not reported to the other store value within 10s", o.ID, got.Deadline)
			}
		}
	})

	t.Run("PayDue", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		o := f.create(t, 10*time.Second, item("A", 3))
		f.clock.Set(o.Deadline.Add(time.Second)) // past the deadline: PayOrder refuses
		_, err := f.db.PayOrder(f.ctx, o.ID, "p")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		got, err := f.db.PayDueOrder(f.ctx, o.ID, "p")
		if err != nil || got.Status != hourglass.StatePaid || got.PaymentID != "p" || !got.PaidAt.Equal(f.clock.Now()) {
			t.Fatalf("PayDueOrder = %+v, %v; want paid with p at now", got, err)
		}
		if again, err := f.db.PayDueOrder(f.ctx, o.ID, "p"); err != nil || !sameOrder(again, got) {
			t.Fatalf("repeat = %+v, %v; want the order unchanged", again, err)
		}
		_, err = f.db.PayDueOrder(f.ctx, o.ID, "q")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		if closed := f.closeOrders(t, o.ID); len(closed) != 0 {
			t.Fatalf("CloseOrders after PayDueOrder closed %+v", closed)
		}
		if s := f.stock(t, "A"); s != [3]int64{7, 0, 3} {
			t.Fatalf("stock %v, want 3 sold once", s)
		}
		var types []hourglass.EventType
		for _, e := range f.events(t, o.ID) {
			types = append(types, e.Type)
		}
		if !slices.Equal(types, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid}) {
			t.Fatalf("events %v, want created, paid", types)
		}
		_, err = f.db.PayDueOrder(f.ctx, o.ID+1000, "p")
		wantCode(t, err, hourglass.CodeNotFound)
		_, err = f.db.PayDueOrder(f.ctx, o.ID, "")
		wantCode(t, err, hourglass.CodeInvalidArgument)
		closed := f.create(t, 10*time.Second, item("A", 1))
		f.clock.Set(closed.Deadline)
		f.closeOrders(t, closed.ID)
		_, err = f.db.PayDueOrder(f.ctx, closed.ID, "p")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
	})
}
