package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"zombiezen.com/go/sqlite"
)

var (
	_ hourglass.WebhookStore  = (*Store)(nil)
	_ hourglass.DeliveryStore = (*Store)(nil)
)

// CreateWebhook implements hourglass.WebhookStore.
func (s *Store) CreateWebhook(ctx context.Context, p hourglass.WebhookParams, limit int) (hourglass.Webhook, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Webhook{}, err
	}
	// Counted before it can commit, so no event written after it skips the
	// fan-out; uncounted if it does not commit.
	s.loadWebhookCount(ctx)
	s.webhooks.n.Add(1)
	var out hourglass.Webhook
	err := s.write(ctx, func(conn *sqlite.Conn, now time.Time) error {
		nowMs := hourglass.UnixMilli(now)
		if limit > 0 {
			n, err := countWebhooks(conn)
			if err != nil {
				return err
			}
			if n >= int64(limit) {
				return hourglass.Errorf(hourglass.CodeLimitExceeded, "webhooks: %d exist, the most allowed (--webhook-max); delete one first", n)
			}
		}
		stmt := conn.Prep(`INSERT INTO webhooks (url, secret, created_at) VALUES (?1, ?2, ?3)`)
		stmt.BindText(1, p.URL)
		stmt.BindText(2, p.Secret)
		stmt.BindInt64(3, nowMs)
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: insert webhook: %w", err)
		}
		id := conn.LastInsertRowID()
		stmt = conn.Prep(`INSERT INTO webhook_subscriptions (webhook_id, type) VALUES (?1, ?2)`)
		for _, t := range p.Events {
			stmt.BindInt64(1, id)
			stmt.BindText(2, string(t))
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: insert webhook subscription: %w", err)
			}
		}
		out = hourglass.Webhook{
			ID:        id,
			URL:       p.URL,
			Events:    append([]hourglass.EventType(nil), p.Events...),
			Secret:    p.Secret,
			CreatedAt: hourglass.FromUnixMilli(nowMs),
		}
		return nil
	})
	if err != nil {
		s.webhooks.n.Add(-1)
	}
	return out, err
}

// Webhooks implements hourglass.WebhookStore.
func (s *Store) Webhooks(ctx context.Context, f hourglass.WebhookFilter) ([]hourglass.Webhook, error) {
	var out []hourglass.Webhook
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		var err error
		out, err = listWebhooks(conn, f.After, 0, f.Limit)
		return err
	})
	return out, err
}

// Webhook returns one webhook, or a not_found error. Safe for concurrent use.
func (s *Store) Webhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	var out hourglass.Webhook
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		var err error
		out, err = getWebhook(conn, id)
		return err
	})
	return out, err
}

func getWebhook(conn *sqlite.Conn, id int64) (hourglass.Webhook, error) {
	if id <= 0 {
		// Ids start at 1; and listWebhooks reads until 0 as "no upper
		// bound", which would return (or delete) the first webhook.
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	ws, err := listWebhooks(conn, id-1, id, 1)
	if err != nil {
		return hourglass.Webhook{}, err
	}
	if len(ws) == 0 {
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	return ws[0], nil
}

// listWebhooks returns up to limit webhooks with id > after, by id, and only
// up to id until when until > 0.
func listWebhooks(conn *sqlite.Conn, after, until int64, limit int) ([]hourglass.Webhook, error) {
	stmt := conn.Prep(`SELECT w.id, w.url, w.secret, w.created_at, s.type FROM
(SELECT * FROM webhooks WHERE id > ?1 AND (?2 = 0 OR id <= ?2) ORDER BY id LIMIT ?3) w
JOIN webhook_subscriptions s ON s.webhook_id = w.id ORDER BY w.id, s.rowid`)
	defer stmt.Reset()
	stmt.BindInt64(1, after)
	stmt.BindInt64(2, until)
	stmt.BindInt64(3, int64(max(limit, 0)))
	var out []hourglass.Webhook
	for {
		row, err := stmt.Step()
		if err != nil {
			return nil, fmt.Errorf("sqlite: list webhooks: %w", err)
		}
		if !row {
			return out, nil
		}
		wid := stmt.ColumnInt64(0)
		if len(out) == 0 || out[len(out)-1].ID != wid {
			out = append(out, hourglass.Webhook{
				ID:        wid,
				URL:       stmt.ColumnText(1),
				Secret:    stmt.ColumnText(2),
				CreatedAt: hourglass.FromUnixMilli(stmt.ColumnInt64(3)),
			})
		}
		w := &out[len(out)-1]
		w.Events = append(w.Events, hourglass.EventType(stmt.ColumnText(4)))
	}
}

// DeleteWebhook implements hourglass.WebhookStore.
func (s *Store) DeleteWebhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	s.loadWebhookCount(ctx)
	var out hourglass.Webhook
	err := s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
		w, err := getWebhook(conn, id)
		if err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM webhook_deliveries WHERE webhook_id = ?1`,
			`DELETE FROM webhook_subscriptions WHERE webhook_id = ?1`,
			`DELETE FROM webhooks WHERE id = ?1`,
		} {
			stmt := conn.Prep(q)
			stmt.BindInt64(1, id)
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: delete webhook %d: %w", id, err)
			}
		}
		out = w
		return nil
	})
	if err == nil {
		s.webhooks.n.Add(-1) // uncounted only once the delete committed
	}
	return out, err
}

const deadLetterColumns = `d.id, d.webhook_id, e.id, e.type, d.order_id, d.attempts, d.last_error, d.failed_at`

func scanDeadLetter(st *sqlite.Stmt) hourglass.DeadLetter {
	return hourglass.DeadLetter{
		ID:        st.ColumnInt64(0),
		WebhookID: st.ColumnInt64(1),
		EventID:   st.ColumnText(2),
		EventType: hourglass.EventType(st.ColumnText(3)),
		OrderID:   st.ColumnInt64(4),
		Attempts:  st.ColumnInt(5),
		LastError: st.ColumnText(6),
		FailedAt:  hourglass.FromUnixMilli(st.ColumnInt64(7)),
	}
}

// DeadLetters implements hourglass.WebhookStore.
func (s *Store) DeadLetters(ctx context.Context, after int64, limit int) ([]hourglass.DeadLetter, error) {
	var out []hourglass.DeadLetter
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		stmt := conn.Prep(`SELECT ` + deadLetterColumns + ` FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.state = 'dead' AND d.id > ?1 ORDER BY d.id LIMIT ?2`)
		defer stmt.Reset()
		stmt.BindInt64(1, after)
		stmt.BindInt64(2, int64(limit))
		for {
			row, err := stmt.Step()
			if err != nil {
				return fmt.Errorf("sqlite: list dead letters: %w", err)
			}
			if !row {
				return nil
			}
			out = append(out, scanDeadLetter(stmt))
		}
	})
	return out, err
}

func getDeadLetter(conn *sqlite.Conn, id int64) (hourglass.DeadLetter, error) {
	stmt := conn.Prep(`SELECT ` + deadLetterColumns + ` FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.state = 'dead' AND d.id = ?1`)
	stmt.BindInt64(1, id)
	var dl hourglass.DeadLetter
	found, err := step(stmt, func(st *sqlite.Stmt) { dl = scanDeadLetter(st) })
	if err != nil {
		return dl, fmt.Errorf("sqlite: get dead letter %d: %w", id, err)
	}
	if !found {
		return dl, plan.DeadLetterNotFound(id)
	}
	return dl, nil
}

// RetryDeadLetter implements hourglass.WebhookStore.
func (s *Store) RetryDeadLetter(ctx context.Context, id int64) (hourglass.DeliveryTimer, error) {
	var out hourglass.DeliveryTimer
	err := s.write(ctx, func(conn *sqlite.Conn, now time.Time) error {
		nowMs := hourglass.UnixMilli(now)
		stmt := conn.Prep(`UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = ?2,
last_error = NULL, failed_at = NULL WHERE id = ?1 AND state = 'dead'`)
		stmt.BindInt64(1, id)
		stmt.BindInt64(2, nowMs)
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: retry dead letter %d: %w", id, err)
		}
		if conn.Changes() == 0 {
			return plan.DeadLetterNotFound(id)
		}
		out = hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(nowMs)}
		return nil
	})
	return out, err
}

// DeleteDeadLetter implements hourglass.WebhookStore.
func (s *Store) DeleteDeadLetter(ctx context.Context, id int64) (hourglass.DeadLetter, error) {
	var out hourglass.DeadLetter
	err := s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
		dl, err := getDeadLetter(conn, id)
		if err != nil {
			return err
		}
		stmt := conn.Prep(`DELETE FROM webhook_deliveries WHERE id = ?1 AND state = 'dead'`)
		stmt.BindInt64(1, id)
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: delete dead letter %d: %w", id, err)
		}
		out = dl
		return nil
	})
	return out, err
}

// DeliveryCounts implements hourglass.WebhookStore.
func (s *Store) DeliveryCounts(ctx context.Context) (pending, dead int, err error) {
	err = s.read(ctx, func(conn *sqlite.Conn) error {
		stmt := conn.Prep(`SELECT
	(SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'),
	(SELECT count(*) FROM webhook_deliveries WHERE state = 'dead')`)
		if _, err := step(stmt, func(st *sqlite.Stmt) { pending, dead = st.ColumnInt(0), st.ColumnInt(1) }); err != nil {
			return fmt.Errorf("sqlite: count deliveries: %w", err)
		}
		return nil
	})
	return pending, dead, err
}

// readTimers runs a prepared query whose rows are (id, next_attempt_at).
func readTimers(stmt *sqlite.Stmt, what string) ([]hourglass.DeliveryTimer, error) {
	defer stmt.Reset()
	var out []hourglass.DeliveryTimer
	for {
		row, err := stmt.Step()
		if err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", what, err)
		}
		if !row {
			return out, nil
		}
		out = append(out, hourglass.DeliveryTimer{ID: stmt.ColumnInt64(0), At: hourglass.FromUnixMilli(stmt.ColumnInt64(1))})
	}
}

// DueDeliveries implements hourglass.DeliveryStore.
func (s *Store) DueDeliveries(ctx context.Context, p hourglass.DueDeliveriesParams) ([]hourglass.DeliveryTimer, error) {
	var out []hourglass.DeliveryTimer
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		stmt := conn.Prep(`SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_due
WHERE state = 'pending' AND (next_attempt_at > ?1 OR (next_attempt_at = ?1 AND id > ?2)) AND next_attempt_at <= ?3 AND ((?5 >> (order_id % 64)) & 1) = 1
ORDER BY next_attempt_at, id LIMIT ?4`)
		stmt.BindInt64(1, hourglass.UnixMilli(p.After))
		stmt.BindInt64(2, p.AfterID)
		stmt.BindInt64(3, hourglass.UnixMilli(p.Until))
		stmt.BindInt64(4, int64(p.Limit))
		stmt.BindInt64(5, p.Parts.Mask())
		var err error
		out, err = readTimers(stmt, "due deliveries")
		return err
	})
	return out, err
}

// PendingDelivery implements hourglass.DeliveryStore.
func (s *Store) PendingDelivery(ctx context.Context, id int64) (hourglass.PendingDelivery, error) {
	return hourglass.OnePending(ctx, s.PendingDeliveries, id)
}

// PendingDeliveries implements hourglass.DeliveryStore: one read
// transaction (readTx) for the whole batch, so a burst's commits empty the
// page cache once per batch, not once per delivery. An order's body is rendered once for
// all its deliveries in the batch (one per webhook).
func (s *Store) PendingDeliveries(ctx context.Context, ids []int64) ([]hourglass.PendingDelivery, error) {
	if err := hourglass.CheckPendingBatch(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	out := make([]hourglass.PendingDelivery, 0, len(ids))
	err := s.readTx(ctx, func(conn *sqlite.Conn) error {
		bodies := map[string][]byte{} // by event id
		for _, id := range ids {
			d, found, err := pendingDelivery(conn, id, bodies)
			if err != nil {
				return err
			}
			if found {
				out = append(out, d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pendingDelivery reads one pending delivery on conn; bodies holds the
// event bodies rendered so far in the same read, by event id.
func pendingDelivery(conn *sqlite.Conn, id int64, bodies map[string][]byte) (hourglass.PendingDelivery, bool, error) {
	var out hourglass.PendingDelivery
	stmt := conn.Prep(`SELECT d.id, d.webhook_id, w.url, w.secret, e.id, e.type, d.order_id, e.created_at, d.attempts,
	d.next_attempt_at, d.event_seq, e.body
FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id JOIN events e ON e.seq = d.event_seq
WHERE d.id = ?1 AND d.state = 'pending'`)
	stmt.BindInt64(1, id)
	var (
		seq, createdAt int64
		stored         []byte // the event's own body (a timer's), or nil
	)
	found, err := step(stmt, func(st *sqlite.Stmt) {
		out = hourglass.PendingDelivery{
			ID:            st.ColumnInt64(0),
			WebhookID:     st.ColumnInt64(1),
			URL:           st.ColumnText(2),
			Secret:        st.ColumnText(3),
			EventID:       st.ColumnText(4),
			EventType:     hourglass.EventType(st.ColumnText(5)),
			OrderID:       st.ColumnInt64(6),
			Attempts:      st.ColumnInt(8),
			NextAttemptAt: hourglass.FromUnixMilli(st.ColumnInt64(9)),
		}
		createdAt, seq, stored = st.ColumnInt64(7), st.ColumnInt64(10), columnBytes(st, 11)
		out.EventCreatedAt = hourglass.FromUnixMilli(createdAt)
	})
	if err != nil {
		return out, false, fmt.Errorf("sqlite: get delivery %d: %w", id, err)
	}
	if !found {
		return out, false, nil
	}
	if b, ok := bodies[out.EventID]; ok {
		out.Body = b
	} else {
		out.Body, err = eventBody(stored, out.EventID, out.EventType, createdAt, func() (hourglass.Order, error) { return getOrder(conn, out.OrderID) })
		if err != nil {
			return out, false, fmt.Errorf("sqlite: delivery %d: %w", id, err)
		}
		bodies[out.EventID] = out.Body
	}
	stmt = conn.Prep(`SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_stream
WHERE webhook_id = ?1 AND order_id = ?2 AND event_seq < ?3 AND state = 'pending' ORDER BY event_seq LIMIT 1`)
	stmt.BindInt64(1, out.WebhookID)
	stmt.BindInt64(2, out.OrderID)
	stmt.BindInt64(3, seq)
	if _, err := step(stmt, func(st *sqlite.Stmt) {
		out.BlockedBy = hourglass.DeliveryTimer{ID: st.ColumnInt64(0), At: hourglass.FromUnixMilli(st.ColumnInt64(1))}
	}); err != nil {
		return out, false, fmt.Errorf("sqlite: delivery %d: look for an earlier one: %w", id, err)
	}
	return out, true, nil
}

// NextDelivery implements hourglass.DeliveryStore.
func (s *Store) NextDelivery(ctx context.Context, webhookID, orderID int64) (hourglass.DeliveryTimer, bool, error) {
	var (
		out   hourglass.DeliveryTimer
		found bool
	)
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		var err error
		out, found, err = nextDelivery(conn, webhookID, orderID)
		return err
	})
	return out, found, err
}

// nextDelivery is NextDelivery on conn, a reader's or the writer's.
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
