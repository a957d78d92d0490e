package engine

import (
	"context"

	"github.com/hourglass/hourglass"
)

// ReminderObserver is an optional interface of an Observer: Reminded is
// called once per reminder the engine settled (sent, or skipped because
// its order's deadline had passed too: r.Skipped); swept is true when the
// sweeper (or start-up recovery) found it.
type ReminderObserver interface {
	Reminded(r hourglass.RemindedOrder, swept bool)
}

// reminders is the engine's part in order reminders (issue #41): with a
// store that sends them (hourglass.ReminderStore), a reminder is one more
// due item (hourglass.ReminderID), loaded, scheduled, relayed, swept and
// reclaimed as an order's deadline is, through the same mechanism; when it
// falls due the store sends it (RemindOrders), in one transaction with the
// check that its order is still pending. A reminder whose time passed
// while hourglass was down is sent at start-up if its order's deadline is
// still ahead and skipped otherwise (the store decides, at its now).
type reminders struct {
	store hourglass.ReminderStore // nil: the store sends none
	obs   ReminderObserver        // nil: not told
}

func newReminders(store Store, obs Observer) reminders {
	var r reminders
	r.store, _ = store.(hourglass.ReminderStore) // optional: a store without reminders only closes
	r.obs, _ = obs.(ReminderObserver)            // optional
	return r
}

// sources puts the reminders' due source before the deadlines' sources:
// a reminder falls due before its order's deadline, so a load or sweep
// that finds both (after a restart) settles the reminder first, and a
// reminder whose order then closes is counted skipped rather than
// dropped unseen with the close.
func (r reminders) sources(src []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error)) []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	if r.store == nil {
		return src
	}
	return append([]func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error){r.store.RemindersDue}, src...)
}

// send settles the reminders of orders (order ids) and returns how many
// it settled; on error the caller retries them (RemindOrders is
// idempotent).
func (r reminders) send(ctx context.Context, orders []int64, swept bool) (int, error) {
	if len(orders) == 0 || r.store == nil {
		return 0, nil
	}
	done, err := r.store.RemindOrders(ctx, orders)
	if err != nil {
		return 0, err
	}
	if r.obs != nil {
		for _, d := range done {
			r.obs.Reminded(d, swept)
		}
	}
	return len(done), nil
}
