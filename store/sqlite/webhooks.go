package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
)

var (
	_ hourglass.WebhookStore  = (*Store)(nil)
	_ hourglass.DeliveryStore = (*Store)(nil)
)

// CreateWebhook implements hourglass.WebhookStore (sqlq's), counted in
// s.webhooks before it can commit, so no event written after it skips the
// fan-out; uncounted if it does not commit.
func (s *Store) CreateWebhook(ctx context.Context, p hourglass.WebhookParams, limit int) (hourglass.Webhook, error) {
	if err := p.Validate(); err != nil { // before counting: an invalid create counts nothing
		return hourglass.Webhook{}, err
	}
	s.loadWebhookCount(ctx)
	s.webhooks.n.Add(1)
	w, err := s.Store.CreateWebhook(ctx, p, limit)
	if err != nil {
		s.webhooks.n.Add(-1)
	}
	return w, err
}

// DeleteWebhook implements hourglass.WebhookStore (sqlq's), uncounted in
// s.webhooks only once the delete committed.
func (s *Store) DeleteWebhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	s.loadWebhookCount(ctx)
	w, err := s.Store.DeleteWebhook(ctx, id)
	if err == nil {
		s.webhooks.n.Add(-1)
	}
	return w, err
}

// nextDelivery is sqlq's NextDelivery on conn, the writer's, for
// RecordAttempt.
func nextDelivery(conn *sqlite.Conn, webhookID, orderID int64) (hourglass.DeliveryTimer, bool, error) {
	var out hourglass.DeliveryTimer
	stmt := conn.Prep(`SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_stream
WHERE webhook_id = ?1 AND order_id = ?2 AND state = 'pending' ORDER BY event_seq LIMIT 1`)
	stmt.BindInt64(1, webhookID)
	stmt.BindInt64(2, orderID)
	found, err := step(stmt, func(st *sqlite.Stmt) {
		out = hourglass.DeliveryTimer{ID: st.ColumnInt64(0), At: hourglass.FromUnixMilli(st.ColumnInt64(1))}
	})
	if err != nil {
		return out, false, fmt.Errorf("sqlite: next delivery of webhook %d, order %d: %w", webhookID, orderID, err)
	}
	return out, found, nil
}

// RecordAttempt implements hourglass.DeliveryStore.
func (s *Store) RecordAttempt(ctx context.Context, r hourglass.AttemptResult) (hourglass.AttemptRecord, error) {
	var rec hourglass.AttemptRecord
	err := s.writeLow(ctx, func(conn *sqlite.Conn, now time.Time) error {
		rec = hourglass.AttemptRecord{}
		nowMs := hourglass.UnixMilli(now)
		var stmt *sqlite.Stmt
		switch {
		case r.OK:
			stmt = conn.Prep(`DELETE FROM webhook_deliveries WHERE id = ?1 AND state = 'pending' AND attempts = ?2`)
		case r.RetryAt.IsZero():
			stmt = conn.Prep(`UPDATE webhook_deliveries SET state = 'dead', attempts = ?2 + 1, last_error = ?3, failed_at = ?4
WHERE id = ?1 AND state = 'pending' AND attempts = ?2`)
			stmt.BindText(3, r.Error)
			stmt.BindInt64(4, nowMs)
		default:
			stmt = conn.Prep(`UPDATE webhook_deliveries SET attempts = ?2 + 1, last_error = ?3, next_attempt_at = ?4
WHERE id = ?1 AND state = 'pending' AND attempts = ?2`)
			stmt.BindText(3, r.Error)
			stmt.BindInt64(4, hourglass.UnixMilli(r.RetryAt))
		}
		stmt.BindInt64(1, r.ID)
		stmt.BindInt64(2, int64(r.Attempts))
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: record attempt of delivery %d: %w", r.ID, err)
		}
		rec.Recorded = conn.Changes() == 1
		if !rec.Recorded || !r.Resolves() {
			return nil
		}
		// On the writer, whose cache the last commit did not empty (a
		// reader's it would).
		next, found, err := nextDelivery(conn, r.WebhookID, r.OrderID)
		if found {
			rec.Next = next
		}
		return err
	})
	return rec, err
}
