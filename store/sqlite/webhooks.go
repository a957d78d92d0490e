package sqlite

import (
	"context"
	"fmt"

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
