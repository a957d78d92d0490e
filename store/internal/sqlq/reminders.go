package sqlq

import (
	"context"

	"github.com/hourglass/hourglass"
)

// RemindersDue implements hourglass.ReminderStore: one range of the
// (status, remind_at, id) index, its order ids turned into reminder ids
// (and the cursor's back).
func (s *Store) RemindersDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	if hourglass.IsReminderID(p.AfterID) {
		p.AfterID = hourglass.ReminderOrderID(p.AfterID)
	}
	out, err := s.due(ctx, "reminders due", "orders", "orders_status_remind_at", "pending_payment", "remind_at", p)
	for i := range out {
		out[i].ID = hourglass.ReminderID(out[i].ID)
	}
	return out, err
}
