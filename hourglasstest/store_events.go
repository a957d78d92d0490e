package hourglasstest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseEvents covers the transactional outbox of events: OrderEvents and
// PruneEvents.
func exerciseEvents(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) storeFixture {
		f := setupStore(t, h)
		f.product(t, "A", "x", 100)
		return f
	}

	t.Run("OnePerTransition", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		at := map[int64][]time.Time{} // order → when each of its events was written
		step := func(id int64) {
			at[id] = append(at[id], f.clock.Now())
			f.clock.Advance(1500 * time.Millisecond)
		}
		params := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Minute, IdempotencyKey: "k1", RequestHash: []byte("h")}
		shipped, _, err := f.db.CreateOrder(f.ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		step(shipped.ID)
		if _, created, err := f.db.CreateOrder(f.ctx, params); err != nil || created { // an idempotent repeat
			t.Fatalf("repeat: created=%v, %v", created, err)
		}
		f.pay(t, shipped.ID, "p1")
		step(shipped.ID)
		f.pay(t, shipped.ID, "p1") // an idempotent repeat
		if _, err := f.db.PayOrder(f.ctx, shipped.ID, "p2"); hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable {
			t.Fatalf("pay with another id: %v", err)
		}
		f.transition(t, shipped.ID, hourglass.ActionShip)
		step(shipped.ID)
		if _, err := f.db.TransitionOrder(f.ctx, shipped.ID, hourglass.ActionShip); hourglass.ErrorCode(err) != hourglass.CodeInvalidTransition {
			t.Fatalf("ship twice: %v", err)
		}
		f.transition(t, shipped.ID, hourglass.ActionComplete)
		step(shipped.ID)

		cancelled := f.create(t, time.Minute, item("A", 1))
		step(cancelled.ID)
		f.transition(t, cancelled.ID, hourglass.ActionCancel)
		step(cancelled.ID)
		closed := f.create(t, time.Second, item("A", 1))
		step(closed.ID)
		if got := f.closeOrders(t, closed.ID, cancelled.ID); len(got) != 1 {
			t.Fatalf("close: %+v", got)
		}
		step(closed.ID)
		if again := f.closeOrders(t, closed.ID); len(again) != 0 {
			t.Fatalf("second close closed %+v", again)
		}
		_, _, err = f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1000)}})
		wantCode(t, err, hourglass.CodeInsufficientStock)

		seen := map[string]bool{}
		for _, tt := range []struct {
			order int64
			want  []hourglass.EventType
		}{
			{shipped.ID, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid, hourglass.EventOrderShipped, hourglass.EventOrderCompleted}},
			{cancelled.ID, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderCancelled}},
			{closed.ID, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderClosed}},
		} {
			evs := f.events(t, tt.order)
			if got := eventTypes(evs); !slices.Equal(got, tt.want) {
				t.Errorf("order %d: events %v, want %v", tt.order, got, tt.want)
				continue
			}
			current := f.order(t, tt.order)
			for i, e := range evs {
				if seen[e.ID] || !strings.HasPrefix(e.ID, "evt_") || len(e.ID) != len("evt_")+26 {
					t.Errorf("event id %q repeated or not evt_ and 26 characters", e.ID)
				}
				seen[e.ID] = true
				if e.OrderID != tt.order || !e.CreatedAt.Equal(at[tt.order][i]) {
					t.Errorf("event %d of order %d: order %d at %v, want at %v", i, tt.order, e.OrderID, e.CreatedAt, at[tt.order][i])
				}
				if i > 0 && e.Seq <= evs[i-1].Seq {
					t.Errorf("order %d: seq %d after %d", tt.order, e.Seq, evs[i-1].Seq)
				}
				want := hourglass.MarshalEvent(hourglass.Event{ID: e.ID, Type: e.Type, CreatedAt: at[tt.order][i], Order: current.AsOf(e.Type)})
				if string(e.Body) != string(want) {
					t.Errorf("order %d event %s body\n got %s\nwant %s", tt.order, e.Type, e.Body, want)
				}
			}
		}
		// The snapshot of each event is the order as its transition returned it.
		if evs := f.events(t, closed.ID); len(evs) == 2 {
			want := f.order(t, closed.ID)
			if want.Status != hourglass.StateClosed || want.CloseReason != hourglass.CloseReasonTimeout || !want.ClosedAt.Equal(at[closed.ID][1]) {
				t.Errorf("closed order %+v", want)
			}
			if got := string(hourglass.MarshalEvent(hourglass.Event{ID: evs[1].ID, Type: evs[1].Type, CreatedAt: evs[1].CreatedAt, Order: want})); got != string(evs[1].Body) {
				t.Errorf("closed event body %s, want %s", evs[1].Body, got)
			}
		}
		if evs, err := f.db.OrderEvents(f.ctx, 999999); err != nil && hourglass.ErrorCode(err) != hourglass.CodeNotFound || len(evs) != 0 {
			t.Errorf("OrderEvents(unknown) = %v, %v; want none", evs, err)
		}
	})

	t.Run("Prune", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		// No webhook yet: these events are referenced by nothing.
		old1 := f.create(t, time.Minute, item("A", 1))
		old2 := f.create(t, time.Minute, item("A", 1))
		f.clock.Set(Epoch.Add(24 * time.Hour))
		edge := f.create(t, time.Minute, item("A", 1))
		w := f.webhook(t, "all", hourglass.EventTypeAll)
		f.clock.Set(Epoch.Add(time.Hour))
		keptPending := f.create(t, time.Minute, item("A", 1))
		keptDead := f.create(t, time.Minute, item("A", 1))
		var pendingID int64
		for _, d := range f.pendingDeliveries(t) {
			switch d.OrderID {
			case keptDead.ID:
				if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: "HTTP 500"}); !rec.Recorded || err != nil {
					t.Fatalf("record dead: %v, %v", rec.Recorded, err)
				}
			case keptPending.ID:
				pendingID = d.ID
			}
		}
		f.clock.Set(Epoch.Add(48 * time.Hour))
		recent := f.create(t, time.Minute, item("A", 1))

		before := Epoch.Add(24 * time.Hour) // edge's event is at before: not strictly before
		if n, err := f.db.PruneEvents(f.ctx, before, 1); err != nil || n != 1 {
			t.Fatalf("PruneEvents(limit 1) = %d, %v; want 1", n, err)
		}
		if n, err := f.db.PruneEvents(f.ctx, before, 1000); err != nil || n != 1 {
			t.Fatalf("PruneEvents = %d, %v; want the other old one", n, err)
		}
		if n, err := f.db.PruneEvents(f.ctx, before, 1000); err != nil || n != 0 {
			t.Fatalf("PruneEvents again = %d, %v; want 0", n, err)
		}
		for _, tt := range []struct {
			name string
			id   int64
			want int
		}{{"old1", old1.ID, 0}, {"old2", old2.ID, 0}, {"edge", edge.ID, 1}, {"keptPending", keptPending.ID, 1}, {"keptDead", keptDead.ID, 1}, {"recent", recent.ID, 1}} {
			if got := len(f.events(t, tt.id)); got != tt.want {
				t.Errorf("%s: %d events left, want %d", tt.name, got, tt.want)
			}
		}
		// What referenced the kept events still works.
		dls, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10})
		if err != nil || len(dls) != 1 || dls[0].OrderID != keptDead.ID || dls[0].EventType != hourglass.EventOrderCreated {
			t.Fatalf("dead letters after prune: %+v, %v", dls, err)
		}
		d, err := f.db.PendingDelivery(f.ctx, pendingID)
		if err != nil || d.WebhookID != w.ID || string(d.Body) != string(f.events(t, keptPending.ID)[0].Body) {
			t.Fatalf("pending delivery after prune: %+v, %v", d, err)
		}
		// Once delivered, its event may go.
		if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: pendingID, OK: true}); !rec.Recorded || err != nil {
			t.Fatalf("record delivered: %v, %v", rec.Recorded, err)
		}
		if n, err := f.db.PruneEvents(f.ctx, before, 1000); err != nil || n != 1 {
			t.Fatalf("PruneEvents after delivery = %d, %v; want 1", n, err)
		}
		if got := len(f.events(t, keptPending.ID)); got != 0 {
			t.Fatalf("delivered event not pruned: %d left", got)
		}
	})
}
