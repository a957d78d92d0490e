package sqlq

import (
	"context"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
)

// DeliveryAttempts implements hourglass.AttemptLog: the latest limit
// attempts of one subject, newest first along delivery_attempts_order
// (order_id, id), returned oldest first.
func (s *Store) DeliveryAttempts(ctx context.Context, orderID int64, limit int) ([]hourglass.DeliveryAttempt, error) {
	if limit <= 0 || limit > hourglass.MaxAttemptsListed {
		limit = hourglass.MaxAttemptsListed
	}
	query, args := s.DeliveryAttemptsSQL(orderID, limit)
	var (
		out                  []hourglass.DeliveryAttempt
		a                    hourglass.DeliveryAttempt
		eventType, errText   string
		at, durationMs, code int64
	)
	dest := []any{&a.ID, &a.OrderID, &a.DeliveryID, &a.WebhookID, &a.EventID, &eventType, &a.Attempt, &at, &durationMs, &code, &a.Outcome, &errText}
	err := s.read(ctx, "list delivery attempts", func(x q) error {
		out = out[:0]
		return x.each(ctx, query, args, dest, func() error {
			a.EventType, a.Error, a.StatusCode = hourglass.EventType(eventType), errText, int(code)
			a.At, a.Duration = hourglass.FromUnixMilli(at), time.Duration(durationMs)*time.Millisecond
			if at == 0 {
				a.At = time.Time{}
			}
			out = append(out, a)
			return nil
		})
	})
	slices.Reverse(out)
	return out, err
}

// DeliveryAttemptsSQL is DeliveryAttempts' statement and arguments
// (exported for the stores' plan tests).
func (s *Store) DeliveryAttemptsSQL(orderID int64, limit int) (string, []any) {
	return `SELECT id, order_id, delivery_id, webhook_id, event_id, event_type, attempt, at, duration_ms, status_code, outcome, error
	FROM ` + s.d.From("delivery_attempts", "delivery_attempts_order") + `
	WHERE order_id = ? ORDER BY id DESC LIMIT ?`, []any{orderID, limit}
}

// PruneDeliveryAttempts implements hourglass.AttemptLog along
// delivery_attempts_at.
func (s *Store) PruneDeliveryAttempts(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return s.prune(ctx, "prune delivery attempts",
		s.deleteSome("delivery_attempts", "id", "delivery_attempts_at", `at < ?`, "at"),
		hourglass.UnixMilli(before), limit)
}
