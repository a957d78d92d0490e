package mysql

import (
	"database/sql"

	"github.com/hourglass/hourglass"
)

// Named timers (hourglass.TimerStore) in the timers table (migration 0005).
//
// Timer ids start at hourglass.TimerIDBase, so an armed timer goes through
// the machinery of an order's deadline unchanged: its id and fire time are
// written to timer_outbox (Config.Outbox) and to order_feed (other
// processes' WatchCreated), TimersDue pages it like PendingDue, and its
// timer.fired event and webhook deliveries carry its id in order_id. The
// one difference in those tables: a timer.fired event keeps its body
// (events.body), since there is no order row to render it from.
//
// Timer writes (ArmTimer, CancelTimer, FireTimers) are group-committed
// with the order writes (store/internal/batch): one transaction, one
// commit, for a batch of them, run again after a deadlock, a lock wait
// timeout, a racing duplicate key or, on Galera, a lost certification.
// Each batch locks the timer rows it decides on (by key, then by id, each
// in ascending order) before it reads now, so the decision and the write
// are one step under the lock, whichever process or Galera node races it.

var _ hourglass.TimerStore = (*Store)(nil)

const timerColumns = `id, timer_key, status, fire_at, fired_at, payload, webhook_id, created_at, updated_at`

// scanTimer reads timerColumns, followed by extra destinations.
func scanTimer(sc scanner, extra ...any) (hourglass.Timer, error) {
	var (
		t                  hourglass.Timer
		key                []byte
		status             string
		fireAt             int64
		firedAt, webhookID sql.NullInt64
		payload            []byte
		created, updated   int64
	)
	dest := append([]any{&t.ID, &key, &status, &fireAt, &firedAt, &payload, &webhookID, &created, &updated}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return t, err
	}
	t.Key, t.Status = string(key), hourglass.TimerStatus(status)
	t.FireAt = hourglass.FromUnixMilli(fireAt)
	if firedAt.Valid {
		t.FiredAt = hourglass.FromUnixMilli(firedAt.Int64)
	}
	if payload != nil {
		t.Payload = payload
	}
	t.WebhookID = webhookID.Int64
	t.CreatedAt, t.UpdatedAt = hourglass.FromUnixMilli(created), hourglass.FromUnixMilli(updated)
	return t, nil
}

// nullBytes is NULL for nil, else b.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// nullID is NULL for 0, else id.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}
