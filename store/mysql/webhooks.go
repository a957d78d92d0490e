package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// maxLastError bounds the stored error text of a failed attempt (a BLOB).
const maxLastError = 60000

// CreateWebhook implements hourglass.WebhookStore. With limit > 0 it locks
// the 'webhooks' settings row (FOR UPDATE) before counting and writes the
// new count into it, so creates racing in any number of processes (on
// Galera: on any number of nodes) never exceed the limit.
func (s *Store) CreateWebhook(ctx context.Context, p hourglass.WebhookParams, limit int) (hourglass.Webhook, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Webhook{}, err
	}
	var out hourglass.Webhook
	err := s.inTx(ctx, "create webhook", func(tx *sql.Tx) error {
		if limit > 0 {
			var v string
			if err := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'webhooks' FOR UPDATE`).Scan(&v); err != nil {
				return fmt.Errorf("lock the webhook count: %w", err)
			}
			var n int64
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhooks`).Scan(&n); err != nil {
				return err
			}
			if n >= int64(limit) {
				return hourglass.Errorf(hourglass.CodeLimitExceeded, "webhooks: %d exist, the most allowed (--webhook-max); delete one first", n)
			}
			// Write the locked row too: on Galera a row lock is this node's
			// alone, and only a write makes two creates on two nodes
			// conflict (at certification), so that one runs again and
			// counts the other's webhook.
			if _, err := tx.ExecContext(ctx, `UPDATE settings SET value = ? WHERE name = 'webhooks'`, strconv.FormatInt(n+1, 10)); err != nil {
				return fmt.Errorf("lock the webhook count: %w", err)
			}
		}
		nowMs, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO webhooks (url, secret, created_at) VALUES (?, ?, ?)`, p.URL, p.Secret, nowMs)
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		args := make([]any, 0, 3*len(p.Events))
		for i, t := range p.Events {
			args = append(args, id, string(t), i)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_subscriptions (webhook_id, type, position) VALUES `+rowsOf(len(p.Events), `(?, ?, ?)`), args...); err != nil {
			return err
		}
		out = hourglass.Webhook{ID: id, URL: p.URL, Events: append([]hourglass.EventType(nil), p.Events...), Secret: p.Secret, CreatedAt: hourglass.FromUnixMilli(nowMs)}
		return nil
	})
	return out, err
}

// Webhooks implements hourglass.WebhookStore.
func (s *Store) Webhooks(ctx context.Context, f hourglass.WebhookFilter) ([]hourglass.Webhook, error) {
	return listWebhooks(ctx, s.db, f.After, 0, f.Limit, false)
}

// Webhook returns one webhook, or a not_found error. Safe for concurrent use.
func (s *Store) Webhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	return getWebhook(ctx, s.db, id, false)
}

func getWebhook(ctx context.Context, q querier, id int64, lock bool) (hourglass.Webhook, error) {
	if id <= 0 { // listWebhooks reads until 0 as "no upper bound"
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	ws, err := listWebhooks(ctx, q, id-1, id, 1, lock)
	if err != nil {
		return hourglass.Webhook{}, err
	}
	if len(ws) == 0 {
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	return ws[0], nil
}

// listWebhooks returns up to limit webhooks with id > after, by id, and only
// up to id until when until > 0; lock takes their rows FOR UPDATE.
func listWebhooks(ctx context.Context, q querier, after, until int64, limit int, lock bool) ([]hourglass.Webhook, error) {
	if limit <= 0 {
		return nil, nil
	}
	forUpdate := ""
	if lock {
		forUpdate = " FOR UPDATE"
	}
	rows, err := q.QueryContext(ctx, `SELECT id, url, secret, created_at FROM webhooks WHERE id > ? AND (? = 0 OR id <= ?) ORDER BY id LIMIT ?`+forUpdate,
		after, until, until, limit)
	if err != nil {
		return nil, fail("list webhooks", err)
	}
	var out []hourglass.Webhook
	byID := map[int64]int{}
	for rows.Next() {
		var (
			w       hourglass.Webhook
			created int64
		)
		if err := rows.Scan(&w.ID, &w.URL, &w.Secret, &created); err != nil {
			rows.Close()
			return nil, fail("list webhooks", err)
		}
		w.CreatedAt = hourglass.FromUnixMilli(created)
		byID[w.ID] = len(out)
		out = append(out, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fail("list webhooks", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	rows, err = q.QueryContext(ctx, `SELECT webhook_id, type FROM webhook_subscriptions FORCE INDEX (webhook_subscriptions_webhook)
WHERE webhook_id BETWEEN ? AND ? ORDER BY webhook_id, position`, out[0].ID, out[len(out)-1].ID)
	if err != nil {
		return nil, fail("list webhook subscriptions", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id  int64
			typ string
		)
		if err := rows.Scan(&id, &typ); err != nil {
			return nil, fail("list webhook subscriptions", err)
		}
		if i, ok := byID[id]; ok {
			out[i].Events = append(out[i].Events, hourglass.EventType(typ))
		}
	}
	return out, fail("list webhook subscriptions", rows.Err())
}

// DeleteWebhook implements hourglass.WebhookStore. It deletes the
// subscriptions first: a batch fanning out reads them with a shared lock,
// so the delete waits for it and then removes the deliveries it created.
func (s *Store) DeleteWebhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	var out hourglass.Webhook
	err := s.inTx(ctx, "delete webhook", func(tx *sql.Tx) error {
		w, err := getWebhook(ctx, tx, id, true)
		if err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM webhook_subscriptions WHERE webhook_id = ?`,
			`DELETE FROM webhook_deliveries WHERE webhook_id = ?`,
			`DELETE FROM webhooks WHERE id = ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return err
			}
		}
		out = w
		return nil
	})
	return out, err
}

const deadLetterColumns = `d.id, d.webhook_id, e.id, e.type, d.order_id, d.attempts, d.last_error, d.failed_at`

func scanDeadLetter(sc scanner) (hourglass.DeadLetter, error) {
	var (
		dl       hourglass.DeadLetter
		typ      string
		lastErr  []byte
		failedAt sql.NullInt64
	)
	err := sc.Scan(&dl.ID, &dl.WebhookID, &dl.EventID, &typ, &dl.OrderID, &dl.Attempts, &lastErr, &failedAt)
	dl.EventType, dl.LastError, dl.FailedAt = hourglass.EventType(typ), string(lastErr), hourglass.FromUnixMilli(failedAt.Int64)
	return dl, err
}

// DeadLetters implements hourglass.WebhookStore.
func (s *Store) DeadLetters(ctx context.Context, after int64, limit int) ([]hourglass.DeadLetter, error) {
	out, err := collect(ctx, s.db, `SELECT `+deadLetterColumns+` FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.state = 'dead' AND d.id > ? ORDER BY d.id LIMIT ?`, []any{after, limit}, func(rows *sql.Rows) (hourglass.DeadLetter, error) { return scanDeadLetter(rows) })
	return out, fail("list dead letters", err)
}

// RetryDeadLetter implements hourglass.WebhookStore: a compare-and-set on
// state 'dead', due at the database's now.
func (s *Store) RetryDeadLetter(ctx context.Context, id int64) (hourglass.DeliveryTimer, error) {
	var out hourglass.DeliveryTimer
	err := s.inTx(ctx, fmt.Sprintf("retry dead letter %d", id), func(tx *sql.Tx) error {
		nowMs, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = ?,
last_error = NULL, failed_at = NULL WHERE id = ? AND state = 'dead'`, nowMs, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
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
	err := s.inTx(ctx, fmt.Sprintf("delete dead letter %d", id), func(tx *sql.Tx) error {
		dl, err := scanDeadLetter(tx.QueryRowContext(ctx, `SELECT `+deadLetterColumns+` FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.state = 'dead' AND d.id = ? FOR UPDATE`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return plan.DeadLetterNotFound(id)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id = ? AND state = 'dead'`, id); err != nil {
			return err
		}
		out = dl
		return nil
	})
	return out, err
}

// DeliveryCounts implements hourglass.WebhookStore: two counts over the
// webhook_deliveries_due index, in one statement (one snapshot).
func (s *Store) DeliveryCounts(ctx context.Context) (pending, dead int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT
	(SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'),
	(SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'dead')`).Scan(&pending, &dead)
	return pending, dead, fail("count deliveries", err)
}

// DueDeliveries implements hourglass.DeliveryStore: one range of the
// (state, next_attempt_at, id) index. Ids are handed out before commit, so
// a delivery with a smaller id may commit later; it is still returned by
// the next call whose cursor is before its due time.
func (s *Store) DueDeliveries(ctx context.Context, p hourglass.DueDeliveriesParams) ([]hourglass.DeliveryTimer, error) {
	after := hourglass.UnixMilli(p.After)
	out, err := collect(ctx, s.db, `SELECT id, next_attempt_at FROM webhook_deliveries FORCE INDEX (webhook_deliveries_due)
WHERE state = 'pending' AND next_attempt_at >= ? AND (next_attempt_at > ? OR id > ?) AND next_attempt_at <= ? AND ((? >> (order_id % 64)) & 1) = 1
ORDER BY next_attempt_at, id LIMIT ?`, []any{after, after, p.AfterID, hourglass.UnixMilli(p.Until), p.Parts.Mask(), p.Limit},
		func(rows *sql.Rows) (hourglass.DeliveryTimer, error) {
			t, err := scanTimerRow(rows)
			return hourglass.DeliveryTimer{ID: t.ID, At: t.At}, err
		})
	return out, fail("due deliveries", err)
}

// PendingDelivery implements hourglass.DeliveryStore (PendingDeliveries of
// one).
func (s *Store) PendingDelivery(ctx context.Context, id int64) (hourglass.PendingDelivery, error) {
	return hourglass.OnePending(ctx, s.PendingDeliveries, id)
}

// PendingDeliveries implements hourglass.DeliveryStore, in one query. The
// body of an order's event is rendered from the order's current row as of
// the event's type, like store/sqlite's, once per event in the batch; a
// timer.fired event's was written with it (events.body).
func (s *Store) PendingDeliveries(ctx context.Context, ids []int64) ([]hourglass.PendingDelivery, error) {
	if err := hourglass.CheckPendingBatch(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	// The order's columns first (scanOrder reads them; NULL-free so that an
	// event with a body, which joins no order, still scans), then the
	// delivery's, then the stream's earlier pending delivery, if any.
	rows, err := s.db.QueryContext(ctx, `SELECT COALESCE(o.id, 0), COALESCE(o.user_id, ''), COALESCE(o.status, ''), COALESCE(o.items, '[]'),
	COALESCE(o.created_at, 0), COALESCE(o.deadline, 0), o.paid_at, o.closed_at, o.close_reason, o.payment_id,
	d.id, d.webhook_id, w.url, w.secret, e.id, e.type, d.order_id, e.created_at, d.attempts, d.next_attempt_at, e.body,
	(SELECT b.id FROM webhook_deliveries b FORCE INDEX (webhook_deliveries_stream)
		WHERE b.webhook_id = d.webhook_id AND b.order_id = d.order_id AND b.event_seq < d.event_seq AND b.state = 'pending'
		ORDER BY b.event_seq LIMIT 1),
	(SELECT b.next_attempt_at FROM webhook_deliveries b FORCE INDEX (webhook_deliveries_stream)
		WHERE b.webhook_id = d.webhook_id AND b.order_id = d.order_id AND b.event_seq < d.event_seq AND b.state = 'pending'
		ORDER BY b.event_seq LIMIT 1)
FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id JOIN events e ON e.seq = d.event_seq
LEFT JOIN orders o ON o.id = d.order_id AND e.body IS NULL
WHERE d.id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) AND d.state = 'pending'`, args...)
	if err != nil {
		return nil, fail("get deliveries", err)
	}
	defer rows.Close()
	out := make([]hourglass.PendingDelivery, 0, len(ids))
	bodies := map[string][]byte{} // by event id
	for rows.Next() {
		var (
			d                    hourglass.PendingDelivery
			typ                  string
			createdAt, nextAt    int64
			body                 []byte
			blockedID, blockedAt sql.NullInt64
		)
		o, err := scanOrder(withMore{rows, []any{&d.ID, &d.WebhookID, &d.URL, &d.Secret, &d.EventID, &typ, &d.OrderID,
			&createdAt, &d.Attempts, &nextAt, &body, &blockedID, &blockedAt}})
		if err != nil {
			return nil, fail("get deliveries", err)
		}
		d.EventType, d.NextAttemptAt = hourglass.EventType(typ), hourglass.FromUnixMilli(nextAt)
		d.EventCreatedAt = hourglass.FromUnixMilli(createdAt)
		switch b, ok := bodies[d.EventID]; {
		case ok:
			d.Body = b
		case body != nil:
			d.Body = body
		case o.ID == 0: // cannot happen: orders are never deleted
			return nil, fmt.Errorf("mysql: delivery %d: order %d of event %s not found", d.ID, d.OrderID, d.EventID)
		default:
			d.Body = renderEvent(d.EventID, d.EventType, createdAt, o)
		}
		bodies[d.EventID] = d.Body
		if blockedID.Valid {
			d.BlockedBy = hourglass.DeliveryTimer{ID: blockedID.Int64, At: hourglass.FromUnixMilli(blockedAt.Int64)}
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("get deliveries", err)
	}
	return out, nil
}

// withMore scans a row whose first columns are what the caller's Scan
// asks for, and the rest into more.
type withMore struct {
	row  scanner
	more []any
}

func (w withMore) Scan(dest ...any) error { return w.row.Scan(append(dest, w.more...)...) }

// NextDelivery implements hourglass.DeliveryStore.
func (s *Store) NextDelivery(ctx context.Context, webhookID, orderID int64) (hourglass.DeliveryTimer, bool, error) {
	var id, at int64
	err := s.db.QueryRowContext(ctx, `SELECT id, next_attempt_at FROM webhook_deliveries FORCE INDEX (webhook_deliveries_stream)
WHERE webhook_id = ? AND order_id = ? AND state = 'pending' ORDER BY event_seq LIMIT 1`, webhookID, orderID).Scan(&id, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return hourglass.DeliveryTimer{}, false, nil
	}
	if err != nil {
		return hourglass.DeliveryTimer{}, false, fail(fmt.Sprintf("next delivery of webhook %d, order %d", webhookID, orderID), err)
	}
	return hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}, true, nil
}
