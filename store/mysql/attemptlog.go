package mysql

import (
	"context"
	"fmt"

	"github.com/hourglass/hourglass"
)

// InsertAttempts implements batch.Tx: one multi-row INSERT into the
// attempt log.
func (t *txn) InsertAttempts(ctx context.Context, attempts []hourglass.DeliveryAttempt) error {
	args := make([]any, 0, 11*len(attempts))
	for _, a := range attempts {
		at := int64(0)
		if !a.At.IsZero() {
			at = hourglass.UnixMilli(a.At)
		}
		args = append(args, a.OrderID, a.DeliveryID, a.WebhookID, a.EventID, string(a.EventType), a.Attempt, at,
			a.Duration.Milliseconds(), a.StatusCode, a.Outcome, []byte(a.Error))
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO delivery_attempts (order_id, delivery_id, webhook_id, event_id, event_type, attempt, at, duration_ms, status_code, outcome, error) VALUES `+
		rowsOf(len(attempts), `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), args...); err != nil {
		return fmt.Errorf("log delivery attempts: %w", err)
	}
	return nil
}
