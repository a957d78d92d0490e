package stored

import (
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
