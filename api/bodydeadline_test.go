package api

import (
	"testing"

	"github.com/hourglass/hourglass"
)

// TestBodyDeadline: a history reads the deadline each kind of event names,
// an order.expiring's (the deadline it reminded of) included.
func TestBodyDeadline(t *testing.T) {
	const d = "2026-12-07T10:00:00.000Z"
	for _, tt := range []struct {
		typ  hourglass.EventType
		body string
	}{
		{hourglass.EventOrderExtended, `{"order":{"deadline":"` + d + `"}}`},
		{hourglass.EventOrderExpiring, `{"id":"e","type":"order.expiring","order":{"deadline":"` + d + `"},"deadline":"` + d + `","remind_at":"2026-12-07T09:50:00.000Z"}`},
		{hourglass.EventTimerFired, `{"timer":{"fire_at":"` + d + `"}}`},
		{hourglass.EventSourceExpiring, `{"source":"s","key":1,"deadline":"` + d + `"}`},
	} {
		got := bodyDeadline(hourglass.HistoryEvent{Type: tt.typ, Body: []byte(tt.body)})
		if got == nil || *got != d {
			t.Errorf("%s: deadline %v; want %s", tt.typ, got, d)
		}
	}
	if got := bodyDeadline(hourglass.HistoryEvent{Type: hourglass.EventOrderClosed, Body: []byte(`{"order":{"deadline":"` + d + `"}}`)}); got != nil {
		t.Errorf("order.closed: deadline %v; want none (its close says it)", *got)
	}
}
