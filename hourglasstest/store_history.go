package hourglasstest

import (
	"context"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseHistory covers HistoryStore.History (GET /v1/orders/{id}/history
// and the timers'): a subject's events in order with their stored bodies,
// the provenance a close or a fire records from its context (and none
// without it), the deliveries of its events with their state and
// attempts, and the bounds on both.
func exerciseHistory(t *testing.T, h StoreHarness) {
	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 10)
		hook := f.webhook(t, "all", hourglass.EventTypeAll)
		o := f.create(t, time.Minute, item("A", 1))
		other := f.create(t, time.Minute, item("A", 1))
		ext, err := f.db.ExtendOrder(f.ctx, hourglass.ExtendOrderParams{ID: o.ID, Deadline: o.Deadline.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		f.clock.Set(ext.Deadline.Add(1500 * time.Millisecond))
		by := hourglass.Closer{Cause: hourglass.CauseSweeper, Node: "node-a"}
		closed, err := f.db.CloseOrders(hourglass.WithCloser(f.ctx, by), []int64{o.ID})
		if err != nil || len(closed) != 1 {
			t.Fatalf("CloseOrders = %v, %v", closed, err)
		}
		f.closeOrders(t, other.ID) // no provenance
		// The order.created delivery fails once; the others stay pending.
		for _, d := range f.pendingDeliveries(t) {
			if d.OrderID == o.ID && d.EventType == hourglass.EventOrderCreated {
				if _, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: "status 503", RetryAt: f.clock.Now().Add(time.Minute), WebhookID: d.WebhookID, OrderID: d.OrderID}); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := f.db.History(f.ctx, hourglass.HistoryParams{Subject: o.ID})
		if err != nil {
			t.Fatal(err)
		}
		wantTypes := []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderExtended, hourglass.EventOrderClosed}
		if len(got.Events) != len(wantTypes) || got.EventsTruncated {
			t.Fatalf("History events = %+v (truncated %v), want types %v", got.Events, got.EventsTruncated, wantTypes)
		}
		for i, e := range got.Events {
			if e.Type != wantTypes[i] || (i > 0 && e.Seq <= got.Events[i-1].Seq) {
				t.Fatalf("event %d = %s seq %d, want %s in seq order", i, e.Type, e.Seq, wantTypes[i])
			}
		}
		if ev := got.Events[1]; len(ev.Body) == 0 {
			t.Fatalf("order.extended has no body: %+v", ev)
		}
		if c := got.Events[2]; c.By != by || !c.CreatedAt.Equal(closed[0].ClosedAt) {
			t.Fatalf("order.closed = %+v, want by %+v at %v", c, by, closed[0].ClosedAt)
		}
		if got.Events[0].By.Known() || got.Events[1].By.Known() {
			t.Fatalf("provenance on events that are not closes: %+v", got.Events)
		}
		if len(got.Deliveries) != 3 || got.DeliveriesTruncated {
			t.Fatalf("deliveries = %+v, want 3", got.Deliveries)
		}
		for _, d := range got.Deliveries {
			if d.WebhookID != hook.ID || d.State != "pending" {
				t.Fatalf("delivery %+v", d)
			}
			if d.EventSeq == got.Events[0].Seq && (d.Attempts != 1 || d.LastError != "status 503") {
				t.Fatalf("order.created's delivery = %+v, want 1 attempt, status 503", d)
			}
		}
		h2, err := f.db.History(f.ctx, hourglass.HistoryParams{Subject: other.ID})
		if err != nil || len(h2.Events) != 2 || h2.Events[1].By.Known() || h2.Events[1].By != (hourglass.Closer{}) {
			t.Fatalf("History(other) = %+v, %v; want a close without provenance", h2, err)
		}
		// Bounds: the latest events, marked truncated.
		b, err := f.db.History(f.ctx, hourglass.HistoryParams{Subject: o.ID, MaxEvents: 2, MaxDeliveries: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 2 || !b.EventsTruncated || b.Events[1].Type != hourglass.EventOrderClosed || len(b.Deliveries) != 1 || !b.DeliveriesTruncated {
			t.Fatalf("bounded History = %+v", b)
		}
		none, err := f.db.History(f.ctx, hourglass.HistoryParams{Subject: o.ID + other.ID + 1000})
		if err != nil || len(none.Events) != 0 || len(none.Deliveries) != 0 {
			t.Fatalf("History(unknown) = %+v, %v", none, err)
		}
	})
	t.Run("Timer", func(t *testing.T) {
		t.Parallel()
		f := withTimers(t, setupStore(t, h))
		tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: "history:1", FireAt: Epoch.Add(time.Second), Payload: []byte(`{"a":1}`)})
		f.clock.Set(Epoch.Add(1200 * time.Millisecond))
		by := hourglass.Closer{Cause: hourglass.CauseDeadline, Node: "node-b"}
		fired, err := f.ts.FireTimers(hourglass.WithCloser(context.Background(), by), []int64{tm.ID})
		if err != nil || len(fired) != 1 {
			t.Fatalf("FireTimers = %v, %v", fired, err)
		}
		got, err := f.db.History(f.ctx, hourglass.HistoryParams{Subject: tm.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Events) != 1 || got.Events[0].Type != hourglass.EventTimerFired || got.Events[0].By != by || len(got.Events[0].Body) == 0 {
			t.Fatalf("timer history = %+v, want one timer.fired by %+v with its body", got.Events, by)
		}
	})
	t.Run("SourceClosedEvents", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 10)
		o := f.create(t, time.Second, item("A", 1))
		f.clock.Set(o.Deadline)
		f.closeOrders(t, o.ID)
		// No source closes here (sources live on the shop's database): an
		// order's events are not among them, and the limit is checked.
		evs, err := f.db.SourceClosedEvents(f.ctx, 0, 10)
		if err != nil || len(evs) != 0 {
			t.Fatalf("SourceClosedEvents = %+v, %v; want none", evs, err)
		}
		for _, limit := range []int{0, hourglass.SourceClosedScanMax + 1} {
			if _, err := f.db.SourceClosedEvents(f.ctx, 0, limit); err == nil {
				t.Errorf("SourceClosedEvents(limit %d): no error", limit)
			}
		}
	})
}
