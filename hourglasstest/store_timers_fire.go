package hourglasstest

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimersFire covers FireTimers and what a fire writes: one
// timer.fired event and its webhook deliveries; a re-arm that commits before
// the fire wins.
func exerciseTimersFire(t *testing.T, setup func(*testing.T) timerFixture) {
	t.Run("FireTimers", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 10)
		a, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Second, Payload: json.RawMessage(`{"p":"a"}`), RequestHash: []byte("h")})
		b, _ := f.arm(t, hourglass.ArmTimerParams{Key: "b", Delay: 2 * time.Second, RequestHash: []byte("h")})
		c, _ := f.arm(t, hourglass.ArmTimerParams{Key: "c", Delay: time.Second, RequestHash: []byte("h")})
		f.cancel(t, "c")
		o := f.create(t, time.Second, item("A", 1))
		if fired := f.fire(t); len(fired) != 0 {
			t.Fatalf("fire of no ids: %+v", fired)
		}
		f.clock.Set(a.FireAt.Add(-time.Millisecond))
		if fired := f.fire(t, a.ID, b.ID); len(fired) != 0 {
			t.Fatalf("fire before any fire_at: %+v; want nothing fired", fired)
		}
		f.clock.Set(a.FireAt.Add(3 * time.Millisecond))
		firedAt := f.clock.Now()
		fired := f.fire(t, a.ID, b.ID, c.ID, o.ID, 424242, hourglass.TimerIDBase+424242)
		if want := (hourglass.FiredTimer{ID: a.ID, Key: "a", FireAt: a.FireAt, FiredAt: firedAt}); len(fired) != 1 || !sameFiredTimer(fired[0], want) {
			t.Fatalf("fire = %+v; want only %+v", fired, want)
		}
		if got := f.order(t, o.ID); got.Status != hourglass.StatePendingPayment {
			t.Fatalf("FireTimers touched order %d: %+v", o.ID, got)
		}
		for range 3 {
			f.clock.Advance(time.Second)
			if again := f.fire(t, a.ID, a.ID); len(again) != 0 {
				t.Fatalf("repeat fire = %+v; want a no-op", again)
			}
		}
		want := a
		want.Status, want.FiredAt, want.UpdatedAt = hourglass.TimerFired, firedAt, firedAt
		if got := f.timer(t, "a"); !sameTimer(got, want) {
			t.Fatalf("fired timer %+v, want %+v", got, want)
		}
		// A duplicate id in one call fires its timer once.
		f.clock.Set(b.FireAt)
		if fired := f.fire(t, b.ID, b.ID); len(fired) != 1 || fired[0].ID != b.ID {
			t.Fatalf("fire of a duplicated id = %+v", fired)
		}
		if got := eventTypes(f.events(t, b.ID)); !slices.Equal(got, []hourglass.EventType{hourglass.EventTimerFired}) {
			t.Fatalf("events of b: %v, want one timer.fired", got)
		}
		// The close of orders does not touch timers either.
		if closed := f.closeOrders(t, a.ID, b.ID, c.ID); len(closed) != 0 {
			t.Fatalf("CloseOrders of timer ids closed %+v", closed)
		}
		if got := f.timer(t, "c"); got.Status != hourglass.TimerCancelled {
			t.Fatalf("c is %s, want cancelled", got.Status)
		}
	})

	t.Run("RearmBeforeTheFireWins", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		a, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Second, RequestHash: []byte("h1")})
		f.clock.Set(a.FireAt)
		// The re-arm commits first: the fire that follows at the old time
		// finds the timer not due and does nothing.
		later, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h2")})
		if fired := f.fire(t, a.ID); len(fired) != 0 {
			t.Fatalf("a fire at the old time after a re-arm fired %+v", fired)
		}
		if got := f.timer(t, "a"); !sameTimer(got, later) {
			t.Fatalf("Timer = %+v, want the re-armed %+v", got, later)
		}
		if evs := f.events(t, a.ID); len(evs) != 0 {
			t.Fatalf("events %v; want none", eventTypes(evs))
		}
		if got := f.timersDue(t, f.clock.Now()); len(got) != 0 {
			t.Fatalf("TimersDue at the old time = %v; want none", got)
		}
		f.clock.Set(later.FireAt)
		if fired := f.fire(t, a.ID); len(fired) != 1 || !fired[0].FireAt.Equal(later.FireAt) {
			t.Fatalf("fire at the new time = %+v", fired)
		}
	})

	t.Run("Events", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: "e", Delay: time.Second, Payload: json.RawMessage(`{"n": 1, "s": "<&>"}`), RequestHash: []byte("h1")})
		f.clock.Advance(1500 * time.Millisecond)
		fired := f.fire(t, tm.ID)
		if len(fired) != 1 {
			t.Fatalf("fire = %+v", fired)
		}
		at := f.timer(t, "e")
		evs := f.events(t, tm.ID)
		if len(evs) != 1 {
			t.Fatalf("events of a fired timer: %v, want one", eventTypes(evs))
		}
		e := evs[0]
		if e.Type != hourglass.EventTimerFired || e.OrderID != tm.ID || !e.CreatedAt.Equal(fired[0].FiredAt) ||
			!strings.HasPrefix(e.ID, "evt_") || len(e.ID) != len("evt_")+26 {
			t.Fatalf("event %+v; want timer.fired of %d at %v with an evt_ id", e, tm.ID, fired[0].FiredAt)
		}
		body := hourglass.MarshalTimerEvent(e.ID, at)
		if body == nil || string(e.Body) != string(body) {
			t.Fatalf("event body\n got %s\nwant %s", e.Body, body)
		}
		// A re-arm changes the timer, not the event.
		f.clock.Advance(time.Second)
		f.arm(t, hourglass.ArmTimerParams{Key: "e", Delay: time.Minute, Payload: json.RawMessage(`{"n":2}`), RequestHash: []byte("h2")})
		if evs := f.events(t, tm.ID); len(evs) != 1 || string(evs[0].Body) != string(body) {
			t.Fatalf("events after a re-arm: %+v; want the one event with its body", evs)
		}
		// Pruned like an order's event once no delivery refers to it.
		if n, err := f.db.PruneEvents(f.ctx, f.clock.Now(), 100); err != nil || n != 1 {
			t.Fatalf("PruneEvents = %d, %v; want the timer's event", n, err)
		}
		if evs := f.events(t, tm.ID); len(evs) != 0 {
			t.Fatalf("events after prune: %v", eventTypes(evs))
		}
	})

	t.Run("Deliveries", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		firedHook := f.webhook(t, "fired", hourglass.EventTimerFired)
		all := f.webhook(t, "all", hourglass.EventTypeAll)
		closedHook := f.webhook(t, "closed", hourglass.EventOrderClosed)
		gone := f.webhook(t, "gone", hourglass.EventTimerFired)
		hooks := map[int64]hourglass.Webhook{firedHook.ID: firedHook, all.ID: all, closedHook.ID: closedHook}
		plain, _ := f.arm(t, hourglass.ArmTimerParams{Key: "plain", Delay: time.Second, Payload: json.RawMessage(`{"x":true}`), RequestHash: []byte("h")})
		direct, _ := f.arm(t, hourglass.ArmTimerParams{Key: "direct", Delay: time.Second, WebhookID: closedHook.ID, RequestHash: []byte("h")})
		orphan, _ := f.arm(t, hourglass.ArmTimerParams{Key: "orphan", Delay: time.Second, WebhookID: gone.ID, RequestHash: []byte("h")})
		if _, err := f.db.DeleteWebhook(f.ctx, gone.ID); err != nil {
			t.Fatal(err)
		}
		ch := f.db.DeliveriesCreated()
		drain(ch)
		f.clock.Advance(time.Second)
		if fired := f.fire(t, plain.ID, direct.ID, orphan.ID); len(fired) != 3 {
			t.Fatalf("fire = %+v, want all three", fired)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no value on DeliveriesCreated after a fire that created deliveries")
		}
		// The one whose webhook was deleted fired all the same.
		if evs := f.events(t, orphan.ID); len(evs) != 1 {
			t.Fatalf("events of the timer whose webhook was deleted: %v, want one", eventTypes(evs))
		}
		type key struct{ webhook, timer int64 }
		want := []key{{firedHook.ID, plain.ID}, {all.ID, plain.ID}, {closedHook.ID, direct.ID}}
		var got []key
		byKey := map[key]hourglass.PendingDelivery{}
		for _, d := range f.pendingDeliveries(t) {
			k := key{d.WebhookID, d.OrderID}
			got = append(got, k)
			byKey[k] = d
			w := hooks[d.WebhookID]
			evs := f.events(t, d.OrderID)
			if len(evs) != 1 {
				t.Fatalf("delivery %+v of a timer with events %v", d, eventTypes(evs))
			}
			if d.URL != w.URL || d.Secret != w.Secret || d.Attempts != 0 || d.EventType != hourglass.EventTimerFired ||
				d.EventID != evs[0].ID || string(d.Body) != string(evs[0].Body) || !d.NextAttemptAt.Equal(f.clock.Now()) || d.BlockedBy != (hourglass.DeliveryTimer{}) {
				t.Errorf("delivery %+v; want webhook %+v's, of event %+v, due at the fire", d, w, evs[0])
			}
		}
		order := func(a, b key) int {
			if a.timer != b.timer {
				return cmp.Compare(a.timer, b.timer)
			}
			return cmp.Compare(a.webhook, b.webhook)
		}
		slices.SortFunc(got, order)
		slices.SortFunc(want, order)
		if !slices.Equal(got, want) {
			t.Fatalf("deliveries (webhook, timer)\n%v\nwant\n%v", got, want)
		}
		if got := f.deliveryCounts(t); got != [2]int{3, 0} {
			t.Fatalf("DeliveryCounts = %v, want 3 pending", got)
		}
		first := byKey[key{firedHook.ID, plain.ID}]
		if next, ok, err := f.db.NextDelivery(f.ctx, firedHook.ID, plain.ID); err != nil || !ok || next.ID != first.ID {
			t.Fatalf("NextDelivery(%d, timer %d) = %+v, %v, %v; want %d", firedHook.ID, plain.ID, next, ok, err, first.ID)
		}
		// A dead letter of a timer's event.
		dead := byKey[key{closedHook.ID, direct.ID}]
		if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: dead.ID, Error: "HTTP 500"}); !rec.Recorded || err != nil {
			t.Fatalf("record dead: %v, %v", rec.Recorded, err)
		}
		dls, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10})
		if err != nil || len(dls) != 1 || dls[0].ID != dead.ID || dls[0].OrderID != direct.ID || dls[0].EventType != hourglass.EventTimerFired || dls[0].EventID != dead.EventID {
			t.Fatalf("dead letters %+v, %v; want delivery %d of timer %d's timer.fired", dls, err, dead.ID, direct.ID)
		}
		// Fired again: its webhooks' streams keep the events in order.
		f.arm(t, hourglass.ArmTimerParams{Key: "plain", Delay: time.Second, RequestHash: []byte("h")})
		f.clock.Advance(time.Second)
		f.fire(t, plain.ID)
		var second []hourglass.PendingDelivery
		for _, d := range f.pendingDeliveries(t) {
			if d.OrderID == plain.ID && d.EventID != first.EventID {
				second = append(second, d)
			}
		}
		if len(second) != 2 {
			t.Fatalf("deliveries of the second fire: %+v, want 2", second)
		}
		for _, d := range second {
			earlier := byKey[key{d.WebhookID, plain.ID}]
			if d.BlockedBy.ID != earlier.ID {
				t.Errorf("second fire's delivery %+v blocked by %+v; want the first fire's %d", d, d.BlockedBy, earlier.ID)
			}
		}
	})
}
