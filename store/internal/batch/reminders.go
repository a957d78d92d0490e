package batch

import (
	"context"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// reminders is what a batch decides about order reminders (order.expiring):
// those it sends or skips, and those an extension moves; each changed
// order's remind_at is written once, with its final value.
type reminders struct {
	// remindOnly: the batch has Remind ops, whose orders need no product
	// lock unless another op names them (a reminder moves no stock).
	remindOnly bool
	remindSet  []*locked
}

// RemindOrders implements hourglass.ReminderStore: in the API writes' lane
// (the closes go first); each listed order's reminder is sent (its
// order.expiring event and deliveries) or skipped and cleared, on the
// locked row, by plan.Reminds. Ids that are not order ids are ignored.
func (w *Writes) RemindOrders(ctx context.Context, ids []int64) ([]hourglass.RemindedOrder, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return id <= 0 || id >= hourglass.ReminderIDBase })
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	r := w.queue(ctx, &Op{Kind: Remind, IDs: slices.Compact(ids)})
	return r.Reminded, r.Err
}

// stockOrders returns whether the batch must lock the products of a
// locked order: not when only Remind ops name it.
func (b *batch) stockOrders() func(id int64) bool {
	if !b.remindOnly {
		return func(int64) bool { return true }
	}
	need := map[int64]bool{}
	for _, o := range b.ops {
		switch o.Kind {
		case Pay, Transition, Extend:
			need[o.ID] = true
		case Close:
			for _, id := range o.IDs {
				need[id] = true
			}
		}
	}
	return func(id int64) bool { return need[id] }
}

// rearm sets the reminder of an order whose deadline the batch moved.
func (b *batch) rearm(lo *locked) {
	if at := plan.Rearm(lo.o, b.now); !at.Equal(lo.o.RemindAt) {
		lo.o.RemindAt = at
		b.remindSet = append(b.remindSet, lo)
	}
}

// remind decides a Remind op: each order's reminder sent, with its event,
// or skipped; either way cleared.
func (b *batch) remind(ids []int64) []hourglass.RemindedOrder {
	var out []hourglass.RemindedOrder
	for _, id := range ids {
		lo := b.orders[id]
		send, skip := plan.Reminds(row(lo), b.now)
		if !send && !skip {
			continue
		}
		r := hourglass.RemindedOrder{OrderID: id, RemindAt: lo.o.RemindAt, Deadline: lo.o.Deadline, Skipped: skip}
		if send {
			r.SentAt = b.now
			// The deadline it names must survive a later extension: it
			// is stored with the event, the rest rendered from the row
			// when read (stored.ReminderBody).
			b.events = append(b.events, &Event{Type: hourglass.EventOrderExpiring, Subject: id, newIdx: -1,
				Body: stored.ReminderBody(lo.o.Deadline, lo.o.RemindAt)})
		}
		lo.o.RemindAt = time.Time{}
		b.remindSet = append(b.remindSet, lo)
		out = append(out, r)
	}
	return out
}

// writeReminders writes the remind_at of the orders whose reminder the
// batch changed: one statement per run of equal values (a burst of
// reminders clears them all at once).
func (b *batch) writeReminders(ctx context.Context) error {
	if len(b.remindSet) == 0 {
		return nil
	}
	seen := make(map[int64]bool, len(b.remindSet))
	byAt := map[int64][]int64{}
	var ats []int64
	for _, lo := range b.remindSet {
		if seen[lo.o.ID] {
			continue
		}
		seen[lo.o.ID] = true
		at := int64(0)
		if !lo.o.RemindAt.IsZero() {
			at = hourglass.UnixMilli(lo.o.RemindAt)
		}
		if _, ok := byAt[at]; !ok {
			ats = append(ats, at)
		}
		byAt[at] = append(byAt[at], lo.o.ID)
	}
	for _, at := range ats {
		ids := byAt[at]
		slices.Sort(ids)
		var t time.Time
		if at != 0 {
			t = hourglass.FromUnixMilli(at)
		}
		if err := b.tx.SetRemindAt(ctx, t, ids); err != nil {
			return err
		}
	}
	return nil
}

// remindersDue appends to due the reminders the batch makes due: its
// created orders', and its extended orders' still pending.
func (b *batch) remindersDue(due []hourglass.DueItem) []hourglass.DueItem {
	for _, n := range b.news {
		if !n.Order.RemindAt.IsZero() {
			due = append(due, hourglass.DueItem{ID: hourglass.ReminderID(n.Order.ID), At: n.Order.RemindAt})
		}
	}
	for _, lo := range b.extended {
		if lo.o.Status == hourglass.StatePendingPayment && !lo.o.RemindAt.IsZero() {
			due = append(due, hourglass.DueItem{ID: hourglass.ReminderID(lo.o.ID), At: lo.o.RemindAt})
		}
	}
	return due
}

// reminderDue adds to u what a committed op changed in the reminders due:
// a create's or an extension's reminder is due, a paid or cancelled
// order's is gone.
func reminderDue(o *Op, u *hourglass.DueUpdate) {
	r := &o.Res
	if r.Err != nil || r.Order.RemindAt.IsZero() {
		return
	}
	item := hourglass.DueItem{ID: hourglass.ReminderID(r.Order.ID), At: r.Order.RemindAt}
	switch o.Kind {
	case Create:
		if r.Created && r.Replay == 0 {
			u.Due = append(u.Due, item)
		}
	case Extend:
		if r.Extended {
			u.Due = append(u.Due, item)
		}
	case Pay:
		u.Gone = append(u.Gone, item.ID)
	case Transition:
		if o.Action == hourglass.ActionCancel {
			u.Gone = append(u.Gone, item.ID)
		}
	}
}
