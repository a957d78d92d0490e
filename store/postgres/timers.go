package postgres

import (
	"encoding/json"

	"github.com/hourglass/hourglass"
	"github.com/jackc/pgx/v5"
)

// Named timers (hourglass.TimerStore; migration 0003). Arms, cancels and
// fires are group-committed with the order writes (store/internal/batch,
// batch.go): a batch's timer writes are a few set-based statements in its
// one transaction, so thousands of arms a second cost one commit (one
// fsync) per batch, and the timers armed are announced in the batch's one
// created-orders NOTIFY with its created orders.
//
// A timer's id is at or above hourglass.TimerIDBase, so it rides unchanged
// in the columns and messages that carry order ids: timer_outbox.order_id,
// the created-orders NOTIFY (cluster.go), and events' and deliveries'
// order_id. A timer.fired event stores its body (events.body): the timer may
// be re-armed after it fired, so the body cannot be rendered later from the
// timer's row the way an order event's is from its order's.

var _ hourglass.TimerStore = (*Store)(nil)

// timerColumns are a timer's columns, in scanTimer's order, of the timers
// table aliased t.
const timerColumns = `t.id, t.key, t.status, t.fire_at, t.fired_at, t.payload, t.webhook_id, t.created_at, t.updated_at`

// scanTimer scans timerColumns followed by extra destinations.
func scanTimer(row pgx.Row, extra ...any) (hourglass.Timer, error) {
	t, _, err := scanOptTimer(row, extra...)
	return t, err
}

// scanOptTimer is scanTimer for columns that may all be NULL (an outer
// join that found no timer): found is false then.
func scanOptTimer(row pgx.Row, extra ...any) (t hourglass.Timer, found bool, err error) {
	var (
		id, fireAt, createdAt, updated *int64
		key, status, payload           *string
		firedAt, webhookID             *int64
	)
	dest := append([]any{&id, &key, &status, &fireAt, &firedAt, &payload, &webhookID, &createdAt, &updated}, extra...)
	if err := row.Scan(dest...); err != nil {
		return t, false, err
	}
	if id == nil || key == nil || status == nil || fireAt == nil || createdAt == nil || updated == nil {
		return t, false, nil
	}
	t.ID, t.Key, t.Status = *id, *key, hourglass.TimerStatus(*status)
	t.FireAt, t.CreatedAt, t.UpdatedAt = hourglass.FromUnixMilli(*fireAt), hourglass.FromUnixMilli(*createdAt), hourglass.FromUnixMilli(*updated)
	if firedAt != nil {
		t.FiredAt = hourglass.FromUnixMilli(*firedAt)
	}
	if payload != nil {
		t.Payload = json.RawMessage(*payload)
	}
	if webhookID != nil {
		t.WebhookID = *webhookID
	}
	return t, true, nil
}
