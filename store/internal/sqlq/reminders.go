package sqlq

import (
	"context"
	"fmt"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
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

// renderEvent returns the JSON body of an order event that
// stored.RenderedFromOrder says is rendered from its order's row: body is
// its stored body (nil, or an order.expiring's stored.ReminderBody) and
// current the row as it is now.
func renderEvent(id string, typ hourglass.EventType, createdAtMs int64, body []byte, current hourglass.Order) []byte {
	if b := stored.ReminderEventBody(id, createdAtMs, body, current); b != nil {
		return b
	}
	return RenderEvent(id, typ, createdAtMs, current)
}

// renderReminders renders the body of each order.expiring event of a
// history of order subject whose stored body is stored.ReminderBody (one
// read of the order, only when there is one), so that a history's Body is
// the body as delivered, as it was when reminders stored it whole.
func (x q) renderReminders(ctx context.Context, subject int64, evs []hourglass.HistoryEvent) error {
	var (
		o    hourglass.Order
		read bool
	)
	for i, e := range evs {
		if e.Type != hourglass.EventOrderExpiring || !stored.RenderedFromOrder(e.Type, e.Body) {
			continue
		}
		if !read {
			var err error
			if o, err = x.order(ctx, subject); err != nil {
				return fmt.Errorf("history: order of event %s: %w", e.ID, err)
			}
			read = true
		}
		evs[i].Body = stored.ReminderEventBody(e.ID, hourglass.UnixMilli(e.CreatedAt), e.Body, o)
	}
	return nil
}
