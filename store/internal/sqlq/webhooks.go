package sqlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// Inserter is a Querier that runs an INSERT and returns the id the database
// generated for its row: the way to that id for a dialect without INSERT …
// RETURNING (Dialect.Returning false: MySQL's LastInsertId).
type Inserter interface {
	InsertID(ctx context.Context, q string, args ...any) (int64, error)
}

// CreateWebhook implements hourglass.WebhookStore. With limit > 0 the count
// and the insert are one atomic step: Dialect.LockWebhooks serializes the
// creates of every process (and node) before the count, in a statement of
// its own, so the count's snapshot is taken after the lock is held (a
// store with one writer needs none). Not idempotent. Errors:
// invalid_argument, limit_exceeded, unavailable.
func (s *Store) CreateWebhook(ctx context.Context, p hourglass.WebhookParams, limit int) (hourglass.Webhook, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Webhook{}, err
	}
	var id, created int64
	err := s.write(ctx, "create webhook", Normal, func(x q) error {
		if limit > 0 {
			if err := s.countWebhooks(ctx, x, limit); err != nil {
				return err
			}
		}
		var err error
		if s.d.Returning {
			_, err = x.row(ctx, `INSERT INTO webhooks (url, secret, created_at) VALUES (?, ?, `+s.d.Now+`) RETURNING id, created_at`,
				[]any{p.URL, p.Secret, s.db.NowArg()}, &id, &created)
		} else if created, err = s.now(ctx, x); err == nil {
			id, err = x.insertID(ctx, `INSERT INTO webhooks (url, secret, created_at) VALUES (?, ?, ?)`, p.URL, p.Secret, created)
		}
		if err != nil {
			return err
		}
		// One row per type, in the order given.
		args := make([]any, 0, 3*len(p.Events))
		for i, t := range p.Events {
			args = append(args, id, string(t), i)
		}
		_, err = x.exec(ctx, `INSERT INTO webhook_subscriptions (webhook_id, type, position) VALUES `+Placeholders(len(p.Events), 3), args...)
		return err
	})
	if err != nil {
		return hourglass.Webhook{}, err
	}
	return hourglass.Webhook{
		ID:        id,
		URL:       p.URL,
		Events:    append([]hourglass.EventType(nil), p.Events...),
		Secret:    p.Secret,
		CreatedAt: hourglass.FromUnixMilli(created),
	}, nil
}

// countWebhooks refuses, with limit_exceeded, a create that would make more
// than limit webhooks, under Dialect.LockWebhooks.
func (s *Store) countWebhooks(ctx context.Context, x q, limit int) error {
	if s.d.LockWebhooks != "" {
		rows, err := x.query(ctx, s.d.LockWebhooks)
		if err != nil {
			return fmt.Errorf("lock the webhook count: %w", err)
		}
		locked := rows.Next()
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock the webhook count: %w", err)
		}
		if !locked {
			return errors.New("lock the webhook count: no row")
		}
	}
	var n int64
	if _, err := x.row(ctx, `SELECT count(*) FROM webhooks`, nil, &n); err != nil {
		return err
	}
	if n >= int64(limit) {
		return hourglass.Errorf(hourglass.CodeLimitExceeded, "webhooks: %d exist, the most allowed (--webhook-max); delete one first", n)
	}
	if s.d.CountedWebhooks != "" {
		if _, err := x.exec(ctx, s.d.CountedWebhooks, n+1); err != nil {
			return fmt.Errorf("lock the webhook count: %w", err)
		}
	}
	return nil
}

// now reads Dialect.Now in a statement of its own, in unix ms, bound to
// the store's NowArg (the test clock's value, or the server's clock).
func (s *Store) now(ctx context.Context, x q) (int64, error) {
	return s.nowOf(ctx, x, s.db.NowArg())
}

// nowOf reads Dialect.Now bound to arg: nil reads the server's clock.
func (s *Store) nowOf(ctx context.Context, x q, arg any) (int64, error) {
	var ms int64
	_, err := x.row(ctx, `SELECT `+s.d.Now, []any{arg}, &ms)
	return ms, err
}

// insertID runs an INSERT on an Inserter and returns the id of its row.
func (x q) insertID(ctx context.Context, sql string, args ...any) (int64, error) {
	in, ok := x.Querier.(Inserter)
	if !ok {
		return 0, errors.New("the querier cannot return an inserted id (Dialect.Returning is false)")
	}
	if x.numbered {
		sql = Rebind(sql)
	}
	return in.InsertID(ctx, sql, args...)
}

// Webhooks implements hourglass.WebhookStore: one statement.
func (s *Store) Webhooks(ctx context.Context, f hourglass.WebhookFilter) ([]hourglass.Webhook, error) {
	var out []hourglass.Webhook
	err := s.read(ctx, "list webhooks", func(x q) error {
		var err error
		out, err = s.listWebhooks(ctx, x, f.After, math.MaxInt64, f.Limit)
		return err
	})
	return out, err
}

// Webhook implements hourglass.WebhookStore. Errors: not_found,
// unavailable.
func (s *Store) Webhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	var out hourglass.Webhook
	err := s.read(ctx, "get webhook", func(x q) error {
		var err error
		out, err = s.getWebhook(ctx, x, id)
		return err
	})
	return out, err
}

// getWebhook reads webhook id on x, or fails with not_found.
func (s *Store) getWebhook(ctx context.Context, x q, id int64) (hourglass.Webhook, error) {
	if id <= 0 { // ids start at 1, and id-1 must not underflow
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	ws, err := s.listWebhooks(ctx, x, id-1, id, 1)
	if err != nil {
		return hourglass.Webhook{}, err
	}
	if len(ws) == 0 {
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	return ws[0], nil
}

// listWebhooks returns up to limit webhooks with after < id <= until, by
// id, each with its event types in the order they were given.
func (s *Store) listWebhooks(ctx context.Context, x q, after, until int64, limit int) ([]hourglass.Webhook, error) {
	var (
		out         []hourglass.Webhook
		id, created int64
		url, secret string
		typ         string
	)
	err := x.each(ctx, `SELECT w.id, w.url, w.secret, w.created_at, s.type FROM
(SELECT * FROM webhooks WHERE id > ? AND id <= ? ORDER BY id LIMIT ?) w
JOIN webhook_subscriptions s ON s.webhook_id = w.id ORDER BY w.id, s.position`, []any{after, until, max(limit, 0)},
		[]any{&id, &url, &secret, &created, &typ}, func() error {
			if len(out) == 0 || out[len(out)-1].ID != id {
				out = append(out, hourglass.Webhook{ID: id, URL: url, Secret: secret, CreatedAt: hourglass.FromUnixMilli(created)})
			}
			w := &out[len(out)-1]
			w.Events = append(w.Events, hourglass.EventType(typ))
			return nil
		})
	return out, err
}

// DeleteWebhook implements hourglass.WebhookStore: the webhook, its
// subscriptions, pending deliveries and dead letters go in one transaction.
// Without Dialect.Cascade the subscriptions are deleted first: a batch
// fanning out reads them with a shared lock (MySQL), so the delete waits
// for it and then removes the deliveries it created. A webhook deleted by
// a racing transaction after the read is not_found. Errors: not_found,
// unavailable.
func (s *Store) DeleteWebhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	var out hourglass.Webhook
	err := s.write(ctx, "delete webhook", Normal, func(x q) error {
		w, err := s.getWebhook(ctx, x, id)
		if err != nil {
			return err
		}
		if !s.d.Cascade {
			for _, del := range []string{
				`DELETE FROM webhook_subscriptions WHERE webhook_id = ?`,
				`DELETE FROM webhook_deliveries WHERE webhook_id = ?`,
			} {
				if _, err := x.exec(ctx, del, id); err != nil {
					return err
				}
			}
		}
		if n, err := x.exec(ctx, `DELETE FROM webhooks WHERE id = ?`, id); err != nil || n == 0 {
			return errOr(err, plan.WebhookNotFound(id))
		}
		out = w
		return nil
	})
	return out, err
}

// errOr returns err, or refusal when err is nil.
func errOr(err, refusal error) error {
	if err != nil {
		return err
	}
	return refusal
}

// deadLetterColumns are a dead letter's columns, of webhook_deliveries d
// joined to events e, in scanDeadLetter's order.
const deadLetterColumns = `d.id, d.webhook_id, e.id, e.type, d.order_id, d.attempts, COALESCE(d.last_error, ''), COALESCE(d.failed_at, 0)`

// deadLetterDest returns the scan destinations of deadLetterColumns and a
// func that finishes dl from them once a row is scanned.
func deadLetterDest(dl *hourglass.DeadLetter) ([]any, func()) {
	var (
		typ      string
		failedAt int64
	)
	return []any{&dl.ID, &dl.WebhookID, &dl.EventID, &typ, &dl.OrderID, &dl.Attempts, &dl.LastError, &failedAt}, func() {
		dl.EventType, dl.FailedAt = hourglass.EventType(typ), hourglass.FromUnixMilli(failedAt)
	}
}

// DeadLetters implements hourglass.WebhookStore. Dead letters are read
// through indexes of dead deliveries only (partial where the store has
// them), so pending deliveries, however many, are not read past:
// webhook_deliveries_dead_id in id order, webhook_deliveries_dead_webhook
// for a webhook's, webhook_deliveries_dead_failed for a failure range (a
// webhook and a range open on one side: the webhook's, sorted). An event
// type is checked on the way, through the event's primary key: at most the
// dead letters retention keeps are read for a rare one.
func (s *Store) DeadLetters(ctx context.Context, f hourglass.DeadLetterFilter) ([]hourglass.DeadLetter, error) {
	query, args := s.DeadLettersSQL(f)
	var (
		out        []hourglass.DeadLetter
		dl         hourglass.DeadLetter
		dest, done = deadLetterDest(&dl)
	)
	err := s.read(ctx, "list dead letters", func(x q) error {
		out = out[:0]
		return x.each(ctx, query, args, dest, func() error {
			done()
			out = append(out, dl)
			return nil
		})
	})
	return out, err
}

// DeadLettersSQL is DeadLetters' statement and arguments (exported for the
// stores' plan tests).
func (s *Store) DeadLettersSQL(f hourglass.DeadLetterFilter) (string, []any) {
	var (
		conds = []string{`d.state = 'dead'`}
		args  []any
	)
	index, orderBy := "webhook_deliveries_dead_id", ` ORDER BY d.id LIMIT ?`
	if f.ByFailedAt() {
		index, orderBy = "webhook_deliveries_dead_failed", ` ORDER BY d.failed_at, d.id LIMIT ?`
		if f.WebhookID != 0 && (f.FailedFrom.IsZero() || f.FailedBefore.IsZero()) {
			index = "webhook_deliveries_dead_webhook"
		}
	} else if f.WebhookID != 0 {
		index = "webhook_deliveries_dead_webhook"
	}
	if f.WebhookID != 0 {
		conds = append(conds, `d.webhook_id = ?`)
		args = append(args, f.WebhookID)
	}
	for _, b := range []struct {
		op string
		t  time.Time
	}{{">=", fromCursor(f.FailedFrom, f.After != 0 && f.ByFailedAt(), f.AfterFailedAt)}, {"<", f.FailedBefore}} {
		if !b.t.IsZero() {
			conds = append(conds, `d.failed_at `+b.op+` ?`)
			args = append(args, ceilMilli(b.t))
		}
	}
	if f.After != 0 {
		if f.ByFailedAt() {
			cond, a := s.keysetAfter("d.failed_at", "d.id", hourglass.UnixMilli(f.AfterFailedAt), f.After)
			conds = append(conds, cond)
			args = append(args, a...)
		} else {
			conds = append(conds, `d.id > ?`)
			args = append(args, f.After)
		}
	}
	if f.EventType != "" {
		conds = append(conds, `e.type = ?`)
		args = append(args, string(f.EventType))
	}
	return `SELECT ` + deadLetterColumns + ` FROM ` + s.d.From("webhook_deliveries d", index) + ` JOIN events e ON e.seq = d.event_seq
WHERE ` + strings.Join(conds, ` AND `) + orderBy, append(args, max(f.Limit, 0))
}

// RetryDeadLetter implements hourglass.WebhookStore: a compare-and-set from
// dead to pending, due at the database's now (Dialect.Now). Errors:
// not_found, unavailable.
func (s *Store) RetryDeadLetter(ctx context.Context, id int64) (hourglass.DeliveryTimer, error) {
	var t hourglass.DeliveryTimer
	err := s.write(ctx, "retry dead letter", Normal, func(x q) error {
		var err error
		t, err = s.retryDeadLetterIn(ctx, x, id)
		return err
	})
	return t, err
}

// retryDeadLetterIn is RetryDeadLetter in the transaction x: not_found
// when id is not a dead letter (nothing written).
func (s *Store) retryDeadLetterIn(ctx context.Context, x q, id int64) (hourglass.DeliveryTimer, error) {
	const update = `UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = %s,
last_error = NULL, failed_at = NULL WHERE id = ? AND state = 'dead'`
	var (
		at    int64
		found bool
		err   error
	)
	if s.d.Returning {
		found, err = x.row(ctx, fmt.Sprintf(update, s.d.Now)+` RETURNING next_attempt_at`, []any{s.db.NowArg(), id}, &at)
	} else if at, err = s.now(ctx, x); err == nil {
		var n int64
		n, err = x.exec(ctx, fmt.Sprintf(update, "?"), at, id)
		found = n > 0
	}
	if err != nil || !found {
		return hourglass.DeliveryTimer{}, errOr(err, plan.DeadLetterNotFound(id))
	}
	return hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}, nil
}

// DeleteDeadLetter implements hourglass.WebhookStore: the dead letter is
// read, then deleted if it is still dead. Errors: not_found, unavailable.
func (s *Store) DeleteDeadLetter(ctx context.Context, id int64) (hourglass.DeadLetter, error) {
	var dl hourglass.DeadLetter
	err := s.write(ctx, "delete dead letter", Normal, func(x q) error {
		var err error
		dl, err = s.deleteDeadLetterIn(ctx, x, id)
		return err
	})
	return dl, err
}

// deleteDeadLetterIn is DeleteDeadLetter in the transaction x: not_found
// when id is not a dead letter (nothing written).
func (s *Store) deleteDeadLetterIn(ctx context.Context, x q, id int64) (hourglass.DeadLetter, error) {
	var (
		dl         hourglass.DeadLetter
		dest, done = deadLetterDest(&dl)
	)
	found, err := x.row(ctx, `SELECT `+deadLetterColumns+` FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.state = 'dead' AND d.id = ?`, []any{id}, dest...)
	if err != nil || !found {
		return dl, errOr(err, plan.DeadLetterNotFound(id))
	}
	if n, err := x.exec(ctx, `DELETE FROM webhook_deliveries WHERE id = ? AND state = 'dead'`, id); err != nil || n == 0 {
		return dl, errOr(err, plan.DeadLetterNotFound(id))
	}
	done()
	return dl, nil
}

// DeliveryCounts implements hourglass.WebhookStore: two counts over the
// (state, next_attempt_at, id) index, in one statement (one snapshot).
func (s *Store) DeliveryCounts(ctx context.Context) (pending, dead int, err error) {
	err = s.read(ctx, "count deliveries", func(x q) error {
		_, err := x.row(ctx, `SELECT
	(SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'),
	(SELECT count(*) FROM webhook_deliveries WHERE state = 'dead')`, nil, &pending, &dead)
		return err
	})
	return pending, dead, err
}

// DueDeliveries implements hourglass.DeliveryStore: one range of the
// (state, next_attempt_at, id) index, its cursor written as the store's
// planner reads a range (Dialect.After). Ids are handed out before commit,
// so a delivery with a smaller id may commit later; it is still returned by
// the next call whose cursor is before its due time.
func (s *Store) DueDeliveries(ctx context.Context, p hourglass.DueDeliveriesParams) ([]hourglass.DeliveryTimer, error) {
	after, args := s.d.After("next_attempt_at", "id", hourglass.UnixMilli(p.After), p.AfterID)
	query := `SELECT id, next_attempt_at FROM ` + s.d.From("webhook_deliveries", "webhook_deliveries_due") + `
WHERE state = 'pending' AND ` + after + ` AND next_attempt_at <= ? AND ` + s.d.InParts("order_id") + `
ORDER BY next_attempt_at, id LIMIT ?`
	args = append(args, hourglass.UnixMilli(p.Until), p.Parts.Mask(), p.Limit)
	var (
		out    []hourglass.DeliveryTimer
		id, at int64
	)
	err := s.read(ctx, "due deliveries", func(x q) error {
		out = out[:0]
		return x.each(ctx, query, args, []any{&id, &at}, func() error {
			out = append(out, hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)})
			return nil
		})
	})
	return out, err
}

// NextDelivery implements hourglass.DeliveryStore: the head of the
// (webhook, order) stream, one seek of the webhook_deliveries_stream index.
func (s *Store) NextDelivery(ctx context.Context, webhookID, orderID int64) (hourglass.DeliveryTimer, bool, error) {
	var (
		id, at int64
		found  bool
	)
	err := s.read(ctx, "next delivery", func(x q) error {
		var err error
		found, err = x.row(ctx, `SELECT id, next_attempt_at FROM `+s.d.From("webhook_deliveries", "webhook_deliveries_stream")+`
WHERE webhook_id = ? AND order_id = ? AND state = 'pending' ORDER BY event_seq LIMIT 1`, []any{webhookID, orderID}, &id, &at)
		return err
	})
	if err != nil || !found {
		return hourglass.DeliveryTimer{}, false, err
	}
	return hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}, true, nil
}

// PendingDelivery implements hourglass.DeliveryStore (PendingDeliveries of
// one). Errors: not_found, unavailable.
func (s *Store) PendingDelivery(ctx context.Context, id int64) (hourglass.PendingDelivery, error) {
	return hourglass.OnePending(ctx, s.PendingDeliveries, id)
}

// pendingOrderColumns are OrderColumns of the order LEFT JOINed as o,
// NULL-free where stored.OrderRow needs it: an event that keeps its body (a
// timer's, a source's) joins no order.
const pendingOrderColumns = `COALESCE(o.id, 0), COALESCE(o.user_id, ''), COALESCE(o.status, ''), COALESCE(o.items, '[]'),
	COALESCE(o.created_at, 0), COALESCE(o.deadline, 0), o.paid_at, o.closed_at, o.close_reason, o.payment_id`

// PendingDeliveries implements hourglass.DeliveryStore, in one query: each
// delivery with its webhook, its event and the stream's earlier pending
// delivery, if any (one seek of webhook_deliveries_stream). An order
// event's body is rendered from the order's current row as of the event
// (hourglass.Order.AsOf; an order.expiring's with the deadline stored with
// it, stored.ReminderBody), once per event in the batch; a timer's or a
// source's event keeps the body written with it. Errors: invalid_argument,
// unavailable.
func (s *Store) PendingDeliveries(ctx context.Context, ids []int64) ([]hourglass.PendingDelivery, error) {
	if err := hourglass.CheckPendingBatch(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	query, args := s.PendingDeliveriesSQL(ids)
	var (
		out                  []hourglass.PendingDelivery
		d                    hourglass.PendingDelivery
		ord                  stored.OrderRow
		typ                  string
		body                 []byte
		created, next        int64
		blockedID, blockedAt *int64
	)
	dest := ord.Dest(&d.ID, &d.WebhookID, &d.OrderID, &d.URL, &d.Secret, &d.EventID, &typ, &created, &body,
		&d.Attempts, &next, &blockedID, &blockedAt)
	err := s.read(ctx, "get deliveries", func(x q) error {
		out = make([]hourglass.PendingDelivery, 0, len(ids))
		bodies := map[string][]byte{} // by event id
		return x.each(ctx, query, args, dest, func() error {
			d.EventType, d.EventCreatedAt = hourglass.EventType(typ), hourglass.FromUnixMilli(created)
			d.NextAttemptAt, d.BlockedBy = hourglass.FromUnixMilli(next), hourglass.DeliveryTimer{}
			switch b, ok := bodies[d.EventID]; {
			case ok:
				d.Body = b
			case !stored.RenderedFromOrder(d.EventType, body):
				d.Body = body
			case ord.ID == 0: // cannot happen: orders are never deleted
				return fmt.Errorf("delivery %d: order %d of event %s not found", d.ID, d.OrderID, d.EventID)
			default:
				o, err := ord.Order()
				if err != nil {
					return err
				}
				d.Body = renderEvent(d.EventID, d.EventType, created, body, o)
			}
			bodies[d.EventID] = d.Body
			if blockedID != nil && blockedAt != nil {
				d.BlockedBy = hourglass.DeliveryTimer{ID: *blockedID, At: hourglass.FromUnixMilli(*blockedAt)}
			}
			out = append(out, d)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PendingDeliveriesSQL is PendingDeliveries' statement and arguments
// (exported for the stores' plan tests): each delivery read by its primary
// key (Dialect.ByID, Dialect.ByKey), never through an index on its
// state, which a burst fills with pending rows.
func (s *Store) PendingDeliveriesSQL(ids []int64) (string, []any) {
	from, where, args := "webhook_deliveries d"+s.d.ByKey, "", []any{any(ids)}
	if s.d.ByID != nil {
		from = s.d.ByID("webhook_deliveries", "d")
	} else {
		where, args = in(s.d, "d.id", ids)
		where += " AND"
	}
	// The stream's earlier pending delivery, one seek each: correlated
	// scalar subqueries, whose plan is that seek on every database, where
	// a join on the row they find was a hash join over every delivery on
	// PostgreSQL with few rows counted.
	earlier := func(col string) string {
		return `(SELECT h.` + col + ` FROM ` + s.d.From("webhook_deliveries h", "webhook_deliveries_stream") + `
		WHERE h.webhook_id = d.webhook_id AND h.order_id = d.order_id AND h.event_seq < d.event_seq AND h.state = 'pending'
		ORDER BY h.event_seq LIMIT 1)`
	}
	return `SELECT ` + pendingOrderColumns + `, d.id, d.webhook_id, d.order_id, w.url, w.secret, e.id, e.type, e.created_at, e.body,
	d.attempts, d.next_attempt_at, ` + earlier("id") + `, ` + earlier("next_attempt_at") + `
FROM ` + from + ` JOIN webhooks w ON w.id = d.webhook_id JOIN events e ON e.seq = d.event_seq
LEFT JOIN orders o ON o.id = d.order_id AND (e.body IS NULL OR e.type = 'order.expiring')
WHERE ` + where + ` d.state = 'pending'`, args
}
