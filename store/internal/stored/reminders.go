package stored

import (
	"bytes"
	"strconv"
	"time"

	"github.com/hourglass/hourglass"
)

// ReminderColumns are an order's reminder columns, which the write path
// reads with OrderColumns when it locks an order (ReminderRow's order).
const ReminderColumns = `remind_at, remind_before_ms`

// ReminderRow is an order's reminder columns (unix ms, NULL as nil).
type ReminderRow struct {
	At       *int64
	BeforeMs int64
}

// Dest returns the scan destinations of ReminderColumns.
func (r *ReminderRow) Dest() []any { return []any{&r.At, &r.BeforeMs} }

// Apply sets o's reminder from the row.
func (r ReminderRow) Apply(o *hourglass.Order) {
	o.RemindBefore = time.Duration(r.BeforeMs) * time.Millisecond
	o.RemindAt = time.Time{}
	if r.At != nil {
		o.RemindAt = hourglass.FromUnixMilli(*r.At)
	}
}

// RemindAtArg is t as remind_at's argument: nil (NULL) when zero.
func RemindAtArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return hourglass.UnixMilli(t)
}

// An order.expiring event stores in events.body only what its order's row
// may no longer say when the event is read: the deadline it was sent for
// (an extension moves the row's later) and its remind_at (cleared when
// sent), as "<deadline ms>,<remind_at ms>", about 27 bytes. The rest of
// its body is the order as it was when sent, which the row still holds
// (hourglass.Order.AsOf: the order was pending, and every other field is
// fixed), so readers render it from the row as they render the other order
// events (ReminderEventBody). The whole body (about 425 bytes of JSON),
// written with the event, was half of what a burst of reminders cost on
// MariaDB (docs/benchmarks/reminders.md). Events written whole before this
// form (JSON, from '{') are read as stored.

// ReminderBody returns the stored body of an order.expiring event for
// deadline and remindAt.
func ReminderBody(deadline, remindAt time.Time) []byte {
	b := make([]byte, 0, 28)
	b = strconv.AppendInt(b, hourglass.UnixMilli(deadline), 10)
	b = append(b, ',')
	return strconv.AppendInt(b, hourglass.UnixMilli(remindAt), 10)
}

// ParseReminderBody returns the deadline and remind_at of a stored
// order.expiring body written by ReminderBody; ok is false for any other
// body (one stored whole).
func ParseReminderBody(b []byte) (deadline, remindAt time.Time, ok bool) {
	d, r, found := bytes.Cut(b, []byte{','})
	if !found {
		return deadline, remindAt, false
	}
	dm, err := strconv.ParseInt(string(d), 10, 64)
	if err != nil {
		return deadline, remindAt, false
	}
	rm, err := strconv.ParseInt(string(r), 10, 64)
	if err != nil {
		return deadline, remindAt, false
	}
	return hourglass.FromUnixMilli(dm), hourglass.FromUnixMilli(rm), true
}

// RenderedFromOrder reports whether an event of type typ with stored body
// is rendered from its order's row: every order event without a body, and
// an order.expiring with ReminderBody's.
func RenderedFromOrder(typ hourglass.EventType, body []byte) bool {
	if body == nil {
		return true
	}
	if typ != hourglass.EventOrderExpiring {
		return false
	}
	_, _, ok := ParseReminderBody(body)
	return ok
}

// ReminderEventBody returns the JSON body of order.expiring event id,
// committed at createdAtMs, from its stored body (ReminderBody) and its
// order's row as it is now, or nil when body is not ReminderBody's.
func ReminderEventBody(id string, createdAtMs int64, body []byte, current hourglass.Order) []byte {
	deadline, remindAt, ok := ParseReminderBody(body)
	if !ok {
		return nil
	}
	current.Deadline = deadline
	return hourglass.MarshalReminderEvent(id, hourglass.FromUnixMilli(createdAtMs), current, remindAt)
}
