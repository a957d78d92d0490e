package sqlite

import (
	"context"

	"github.com/hourglass/hourglass"
)

// InsertAttempts implements batch.Tx: one row of the attempt log a
// recorded attempt.
func (t *txn) InsertAttempts(_ context.Context, attempts []hourglass.DeliveryAttempt) error {
	for _, a := range attempts {
		stmt := t.conn.Prep(`INSERT INTO delivery_attempts (order_id, delivery_id, webhook_id, event_id, event_type, attempt, at, duration_ms, status_code, outcome, error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)`)
		stmt.BindInt64(1, a.OrderID)
		stmt.BindInt64(2, a.DeliveryID)
		stmt.BindInt64(3, a.WebhookID)
		stmt.BindText(4, a.EventID)
		stmt.BindText(5, string(a.EventType))
		stmt.BindInt64(6, int64(a.Attempt))
		stmt.BindInt64(7, attemptAt(a))
		stmt.BindInt64(8, a.Duration.Milliseconds())
		stmt.BindInt64(9, int64(a.StatusCode))
		stmt.BindText(10, a.Outcome)
		stmt.BindText(11, a.Error)
		if err := exec(stmt, "log delivery attempt"); err != nil {
			return err
		}
	}
	return nil
}

// attemptAt is an attempt's time as the log keeps it: unix ms, 0 when
// unknown.
func attemptAt(a hourglass.DeliveryAttempt) int64 {
	if a.At.IsZero() {
		return 0
	}
	return hourglass.UnixMilli(a.At)
}
