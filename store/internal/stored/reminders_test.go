package stored

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// TestReminderBody: an order.expiring stores its deadline and remind_at;
// rendered with the order's row as it is later (extended, paid), its body
// is the one the reminder would have written whole at its time; a body
// stored whole is read as stored.
func TestReminderBody(t *testing.T) {
	t.Parallel()
	at := func(ms int64) time.Time { return hourglass.FromUnixMilli(1_765_000_000_000 + ms) }
	deadline, remindAt, sentAt := at(30_000), at(20_000), at(20_003)
	sent := hourglass.Order{ID: 7, UserID: "u1", Status: hourglass.StatePendingPayment, Items: []hourglass.Item{{SKU: "A", Quantity: 2}},
		CreatedAt: at(0), Deadline: deadline, RemindAt: remindAt, RemindBefore: 10 * time.Second}
	whole := hourglass.MarshalReminderEvent("evt_1", sentAt, sent, remindAt)

	body := ReminderBody(deadline, remindAt)
	if len(body) > 32 {
		t.Errorf("stored body %q: %d bytes, want at most 32", body, len(body))
	}
	d, r, ok := ParseReminderBody(body)
	if !ok || !d.Equal(deadline) || !r.Equal(remindAt) {
		t.Fatalf("ParseReminderBody(%q) = %v, %v, %v; want %v, %v", body, d, r, ok, deadline, remindAt)
	}
	later := sent
	later.Deadline, later.RemindAt = at(90_000), at(80_000)                             // extended after the reminder ...
	later.Status, later.PaidAt, later.PaymentID = hourglass.StatePaid, at(85_000), "p1" // ... then paid
	for name, cur := range map[string]hourglass.Order{"as sent": sent, "extended and paid since": later} {
		if got := ReminderEventBody("evt_1", hourglass.UnixMilli(sentAt), body, cur); string(got) != string(whole) {
			t.Errorf("%s: rendered %s, want %s", name, got, whole)
		}
	}
	if !json.Valid(whole) || !RenderedFromOrder(hourglass.EventOrderExpiring, body) || !RenderedFromOrder(hourglass.EventOrderPaid, nil) {
		t.Fatal("a stored reminder body and a body-less event must be rendered from the order")
	}
	for _, tc := range []struct {
		typ  hourglass.EventType
		body string
	}{
		{hourglass.EventOrderExpiring, string(whole)}, // written whole, before ReminderBody
		{hourglass.EventOrderExtended, `{"id":"evt_2"}`},
		{hourglass.EventTimerFired, "1,2"},
		{hourglass.EventOrderExpiring, "1;2"},
		{hourglass.EventOrderExpiring, "x,2"},
	} {
		if RenderedFromOrder(tc.typ, []byte(tc.body)) {
			t.Errorf("RenderedFromOrder(%s, %q) = true, want its stored body read as stored", tc.typ, tc.body)
		}
		if tc.typ == hourglass.EventOrderExpiring && ReminderEventBody("evt_1", 0, []byte(tc.body), sent) != nil {
			t.Errorf("ReminderEventBody(%q) rendered; want nil", tc.body)
		}
	}
}
