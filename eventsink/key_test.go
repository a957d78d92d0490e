package eventsink

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// TestKeyOf: an order's events are keyed by its id, a timer's by its key,
// a source row's by its source and key.
func TestKeyOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	timerID := hourglass.TimerIDBase + 7
	srcID := hourglass.SourceEventOrderID("shop_orders", 42)
	for _, c := range []struct {
		e    hourglass.EventRecord
		want string
	}{
		{hourglass.EventRecord{Type: hourglass.EventOrderClosed, OrderID: 17}, "17"},
		{hourglass.EventRecord{Type: hourglass.EventTimerFired, OrderID: timerID,
			Body: hourglass.MarshalTimerEvent("evt_1", hourglass.Timer{ID: timerID, Key: "coupon:42", Status: hourglass.TimerFired, FireAt: at, FiredAt: at})}, "coupon:42"},
		{hourglass.EventRecord{Type: hourglass.EventSourceClosed, OrderID: srcID,
			Body: hourglass.MarshalSourceEvent("evt_2", "shop_orders", 42, at, at)}, "shop_orders:42"},
		{hourglass.EventRecord{Type: hourglass.EventSourceExpiring, OrderID: srcID,
			Body: hourglass.MarshalSourceReminderEvent("evt_3", "shop_orders", 42, at, at, at.Add(-time.Minute))}, "shop_orders:42"},
		{hourglass.EventRecord{Type: hourglass.EventTimerFired, OrderID: timerID, Body: []byte(`not json`)}, "4611686018427387911"},
	} {
		if got := keyOf(c.e); got != c.want {
			t.Errorf("keyOf(%s of %d) = %q, want %q", c.e.Type, c.e.OrderID, got, c.want)
		}
	}
}
