package postgres

import (
	"context"

	"github.com/hourglass/hourglass"
)

// InsertAttempts implements batch.Tx: the attempt log's rows in one
// statement of arrays, sent with the commit.
func (t *txn) InsertAttempts(_ context.Context, attempts []hourglass.DeliveryAttempt) error {
	n := len(attempts)
	var (
		orders, deliveries, webhooks, at, took = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		eventIDs, types, outcomes, errs        = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		nums, codes                            = make([]int32, n), make([]int32, n)
	)
	for i, a := range attempts {
		orders[i], deliveries[i], webhooks[i], took[i] = a.OrderID, a.DeliveryID, a.WebhookID, a.Duration.Milliseconds()
		if !a.At.IsZero() {
			at[i] = hourglass.UnixMilli(a.At)
		}
		eventIDs[i], types[i], outcomes[i], errs[i] = a.EventID, string(a.EventType), a.Outcome, a.Error
		nums[i], codes[i] = int32(a.Attempt), int32(a.StatusCode)
	}
	t.queue("log delivery attempts", `INSERT INTO delivery_attempts (order_id, delivery_id, webhook_id, event_id, event_type, attempt, at, duration_ms, status_code, outcome, error)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::bigint[], $8::bigint[], $9::int[], $10::text[], $11::text[])`,
		orders, deliveries, webhooks, eventIDs, types, nums, at, took, codes, outcomes, errs)
	return nil
}
