package hourglass

import (
	"context"
	"encoding/json"
	"time"
)

// A reminder is an order's deadline, earlier: at RemindAt = Deadline −
// RemindBefore a pending order gets one order.expiring event ("your order
// closes in 10 minutes"). The lead comes from the create's RemindBefore,
// else the policy (Policy.RemindLead); an order whose lead is not shorter
// than its whole timeout gets no reminder (its RemindAt would be at or
// before its creation).
//
// The engine times a reminder as every due item, through the same delay
// mechanism: its DueItem carries ReminderID(order id), in the range
// [ReminderIDBase, SourceIDBase), so every mechanism that carries an id
// carries a reminder unchanged, and an id's partition is its order's
// (ReminderIDBase is a multiple of Partitions). DueKindOf names the kind
// of a due id.
const ReminderIDBase int64 = 1 << 60

// NoReminder, as CreateOrderParams.RemindBefore, asks for no reminder
// whatever the policy says.
const NoReminder time.Duration = -1

// ReminderID returns the due id of order orderID's reminder.
func ReminderID(orderID int64) int64 { return ReminderIDBase + orderID }

// IsReminderID reports whether id is a reminder's due id (ReminderID).
func IsReminderID(id int64) bool { return id >= ReminderIDBase && id < SourceIDBase }

// ReminderOrderID returns the order of a reminder's due id.
func ReminderOrderID(id int64) int64 { return id - ReminderIDBase }

// DueKind says what a due item is.
type DueKind int

const (
	DueOrder    DueKind = iota // an order's deadline: close it
	DueReminder                // an order's reminder: send its order.expiring
	DueSource                  // a shop's row (package source)
	DueTimer                   // a client's timer: fire it
)

// DueKindOf returns the kind of due id id, from its range.
func DueKindOf(id int64) DueKind {
	switch {
	case IsTimerID(id):
		return DueTimer
	case IsSourceID(id):
		return DueSource
	case IsReminderID(id):
		return DueReminder
	}
	return DueOrder
}

// Kind returns the kind of d (DueKindOf its ID).
func (d DueItem) Kind() DueKind { return DueKindOf(d.ID) }

// EventOrderExpiring is an order's reminder: it is still pending and closes
// at its deadline, RemindBefore from now. Its body is
// {"id","type","created_at","order":{…},"deadline","remind_at"}: the
// deadline and remind_at are stored with the event (the deadline may move
// later), the order is rendered from its row (Order.AsOf) with that
// deadline.
const EventOrderExpiring EventType = "order.expiring"

// RemindLead returns the reminder lead of an order whose items have these
// categories: the longest lead among the categories that set one (the
// earliest nudge any of them asks for; a category set to 0 asks for
// none), else RemindBefore; 0 means none.
func (p Policy) RemindLead(categories []string) time.Duration {
	var (
		best  time.Duration
		found bool
	)
	for _, c := range categories {
		if d, ok := p.RemindCategories[c]; ok {
			best, found = max(best, d), true
		}
	}
	if found {
		return best
	}
	return p.RemindBefore
}

// RemindAt returns when an order created at created with this deadline and
// lead is reminded, or zero for none: no lead, or a lead not shorter than
// the time from created to the deadline (the reminder would be due at or
// before the order exists). Times are whole milliseconds, as stored.
func RemindAt(created, deadline time.Time, lead time.Duration) time.Time {
	if lead <= 0 {
		return time.Time{}
	}
	at := UnixMilli(deadline) - lead.Milliseconds()
	if at <= UnixMilli(created) {
		return time.Time{}
	}
	return FromUnixMilli(at)
}

// ValidateRemindBefore checks a reminder lead: 0 (none) or MinTimeout up
// to MaxTimeout; field names the input in the error message.
func ValidateRemindBefore(field string, d time.Duration) error {
	if d == 0 {
		return nil
	}
	if d < MinTimeout || d > MaxTimeout {
		return Errorf(CodeInvalidArgument, "%s: must be 0 (no reminder) or between %d and %d ms, got %d", field,
			MinTimeout.Milliseconds(), MaxTimeout.Milliseconds(), d.Milliseconds())
	}
	return nil
}

// RemindedOrder reports one reminder ReminderStore.RemindOrders settled.
type RemindedOrder struct {
	OrderID  int64
	RemindAt time.Time // when it was due
	Deadline time.Time
	// SentAt is when its order.expiring committed (the transaction's now);
	// zero when it was skipped.
	SentAt time.Time
	// Skipped: it was due but will never be sent: its order was paid,
	// cancelled or closed first, or its deadline passed too (the process
	// was down). No event was written.
	Skipped bool
}

// ReminderStore sends order reminders. Every store of package store
// implements it; methods are safe for concurrent use.
type ReminderStore interface {
	// RemindOrders settles, in one transaction, the reminder of each listed
	// order (order ids) due at or before now: an order still pending with
	// its deadline after now gets its order.expiring event (and its
	// deliveries); any other (paid, cancelled, closed, or past its
	// deadline) is reported Skipped, with no event. Either way the
	// reminder is cleared, so it is sent at most once per deadline
	// (ExtendOrder sets a new one). An order without a reminder (none, or
	// settled already) or not yet due is left alone and not reported. The
	// check and the event are one step on the locked row. Idempotent.
	// Errors: unavailable.
	RemindOrders(ctx context.Context, ids []int64) ([]RemindedOrder, error)
	// RemindersDue returns up to p.Limit pending orders' reminders due at
	// or before p.Until, as DueItems of ReminderID(order id) at RemindAt,
	// in (RemindAt, id) order strictly after the cursor (p.After,
	// p.AfterID, a reminder id). Errors: unavailable.
	RemindersDue(ctx context.Context, p PendingDueParams) ([]DueItem, error)
}

type reminderEventJSON struct {
	ID        string    `json:"id"`
	Type      EventType `json:"type"`
	CreatedAt string    `json:"created_at"`
	Order     orderJSON `json:"order"`
	Deadline  string    `json:"deadline"`
	RemindAt  string    `json:"remind_at"`
}

// MarshalReminderEvent returns the body of an order.expiring event written
// at createdAt for order o (as of the event: o.Deadline is the deadline it
// was sent for), due at remindAt:
// {"id","type","created_at","order":{…},"deadline","remind_at"}. It
// cannot fail.
func MarshalReminderEvent(id string, createdAt time.Time, o Order, remindAt time.Time) []byte {
	b, _ := json.Marshal(reminderEventJSON{ID: id, Type: EventOrderExpiring, CreatedAt: formatTime(createdAt),
		Order: newOrderJSON(o.AsOf(EventOrderExpiring)), Deadline: formatTime(o.Deadline), RemindAt: formatTime(remindAt)}) // strings: cannot fail
	return b
}
