package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/timing"
	"github.com/jackc/pgx/v5"
)

// webhookLockClass and webhookLockKey name the transaction advisory lock
// that makes CreateWebhook's count and insert one atomic step.
const (
	webhookLockClass int32 = 0x68676b32 // "hgk2"
	webhookLockKey   int32 = 1
)

// CreateWebhook implements hourglass.WebhookStore. With limit > 0, the count
// and the insert run under a transaction advisory lock every CreateWebhook
// on the database takes, so concurrent creates (any process) cannot pass the
// limit together. Not idempotent. Errors: invalid_argument, limit_exceeded,
// unavailable.
func (s *Store) CreateWebhook(ctx context.Context, p hourglass.WebhookParams, limit int) (hourglass.Webhook, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Webhook{}, err
	}
	var out hourglass.Webhook
	err := s.tx(ctx, "create webhook", func(tx pgx.Tx) error {
		if limit > 0 {
			// Two statements: the count must take its snapshot after the
			// lock is held (one statement's snapshot predates its wait).
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int, $2::int)`, webhookLockClass, webhookLockKey); err != nil {
				return err
			}
			var n int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhooks`).Scan(&n); err != nil {
				return err
			}
			if n >= int64(limit) {
				return hourglass.Errorf(hourglass.CodeLimitExceeded, "webhooks: %d exist, the most allowed (--webhook-max); delete one first", n)
			}
		}
		var id, created int64
		if err := tx.QueryRow(ctx, `INSERT INTO webhooks (url, secret, created_at) VALUES ($1, $2, COALESCE($3::bigint, `+dbNow+`))
RETURNING id, created_at`, p.URL, p.Secret, s.nowArg()).Scan(&id, &created); err != nil {
			return err
		}
		types := make([]string, len(p.Events))
		for i, t := range p.Events {
			types[i] = string(t)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_subscriptions (webhook_id, type, position)
SELECT $1, t, p FROM unnest($2::text[]) WITH ORDINALITY AS x(t, p)`, id, types); err != nil {
			return err
		}
		out = hourglass.Webhook{
			ID:        id,
			URL:       p.URL,
			Events:    append([]hourglass.EventType(nil), p.Events...),
			Secret:    p.Secret,
			CreatedAt: hourglass.FromUnixMilli(created),
		}
		return nil
	})
	return out, err
}

// Webhooks implements hourglass.WebhookStore.
func (s *Store) Webhooks(ctx context.Context, f hourglass.WebhookFilter) ([]hourglass.Webhook, error) {
	out, err := listWebhooks(ctx, s.pool, f.After, 0, f.Limit)
	return out, s.fail("list webhooks", err)
}

// Webhook implements hourglass.WebhookStore.
func (s *Store) Webhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	if id <= 0 {
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	ws, err := listWebhooks(ctx, s.pool, id-1, id, 1)
	if err != nil {
		return hourglass.Webhook{}, s.fail("get webhook", err)
	}
	if len(ws) == 0 {
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	return ws[0], nil
}

type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// listWebhooks returns up to limit webhooks with id > after, by id, and only
// up to id until when until > 0.
func listWebhooks(ctx context.Context, q queryer, after, until int64, limit int) ([]hourglass.Webhook, error) {
	rows, err := q.Query(ctx, `SELECT w.id, w.url, w.secret, w.created_at, s.type FROM
(SELECT * FROM webhooks WHERE id > $1 AND ($2 = 0 OR id <= $2) ORDER BY id LIMIT $3) w
JOIN webhook_subscriptions s ON s.webhook_id = w.id ORDER BY w.id, s.position`, after, until, max(limit, 0))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []hourglass.Webhook
	for rows.Next() {
		var (
			wid, created int64
			url, secret  string
			typ          string
		)
		if err := rows.Scan(&wid, &url, &secret, &created, &typ); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].ID != wid {
			out = append(out, hourglass.Webhook{ID: wid, URL: url, Secret: secret, CreatedAt: hourglass.FromUnixMilli(created)})
		}
		w := &out[len(out)-1]
		w.Events = append(w.Events, hourglass.EventType(typ))
	}
	return out, rows.Err()
}

// DeleteWebhook implements hourglass.WebhookStore: the webhook, its
// subscriptions, pending deliveries and dead letters go in one transaction
// (the foreign keys cascade). Errors: not_found, unavailable.
func (s *Store) DeleteWebhook(ctx context.Context, id int64) (hourglass.Webhook, error) {
	if id <= 0 {
		return hourglass.Webhook{}, plan.WebhookNotFound(id)
	}
	var out hourglass.Webhook
	err := s.tx(ctx, "delete webhook", func(tx pgx.Tx) error {
		ws, err := listWebhooks(ctx, tx, id-1, id, 1)
		if err != nil {
			return err
		}
		if len(ws) == 0 {
			return plan.WebhookNotFound(id)
		}
		ct, err := tx.Exec(ctx, `DELETE FROM webhooks WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if ct.RowsAffected() == 0 {
			return plan.WebhookNotFound(id)
		}
		out = ws[0]
		return nil
	})
	return out, err
}

const deadLetterColumns = `d.id, d.webhook_id, e.id, e.type, d.order_id, d.attempts, COALESCE(d.last_error, ''), COALESCE(d.failed_at, 0)`

func scanDeadLetter(row pgx.Row) (hourglass.DeadLetter, error) {
	var (
		dl       hourglass.DeadLetter
		typ      string
		failedAt int64
	)
	err := row.Scan(&dl.ID, &dl.WebhookID, &dl.EventID, &typ, &dl.OrderID, &dl.Attempts, &dl.LastError, &failedAt)
	dl.EventType, dl.FailedAt = hourglass.EventType(typ), hourglass.FromUnixMilli(failedAt)
	return dl, err
}

// DeadLetters implements hourglass.WebhookStore.
func (s *Store) DeadLetters(ctx context.Context, after int64, limit int) ([]hourglass.DeadLetter, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterColumns+` FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.state = 'dead' AND d.id > $1 ORDER BY d.id LIMIT $2`, after, max(limit, 0))
	if err != nil {
		return nil, s.fail("list dead letters", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.DeadLetter, error) { return scanDeadLetter(row) })
	return out, s.fail("list dead letters", err)
}

// RetryDeadLetter implements hourglass.WebhookStore: a compare-and-set from
// dead to pending, due at the database's now. Errors: not_found, unavailable.
func (s *Store) RetryDeadLetter(ctx context.Context, id int64) (hourglass.DeliveryTimer, error) {
	var at int64
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `UPDATE webhook_deliveries SET state = 'pending', attempts = 0,
next_attempt_at = COALESCE($2::bigint, `+dbNow+`), last_error = NULL, failed_at = NULL
WHERE id = $1 AND state = 'dead' RETURNING next_attempt_at`, id, s.nowArg()).Scan(&at)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return hourglass.DeliveryTimer{}, plan.DeadLetterNotFound(id)
	}
	if err != nil {
		return hourglass.DeliveryTimer{}, s.fail("retry dead letter", err)
	}
	return hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}, nil
}

// DeleteDeadLetter implements hourglass.WebhookStore. Errors: not_found,
// unavailable.
func (s *Store) DeleteDeadLetter(ctx context.Context, id int64) (hourglass.DeadLetter, error) {
	var dl hourglass.DeadLetter
	err := s.retry(ctx, func() error {
		var err error
		dl, err = scanDeadLetter(s.pool.QueryRow(ctx, `WITH d AS (
	DELETE FROM webhook_deliveries WHERE id = $1 AND state = 'dead' RETURNING *
) SELECT `+deadLetterColumns+` FROM d JOIN events e ON e.seq = d.event_seq`, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return dl, plan.DeadLetterNotFound(id)
	}
	return dl, s.fail("delete dead letter", err)
}

// DeliveryCounts implements hourglass.WebhookStore: two counts over the
// (state, next_attempt_at, id) index, in one snapshot.
func (s *Store) DeliveryCounts(ctx context.Context) (pending, dead int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'),
	(SELECT count(*) FROM webhook_deliveries WHERE state = 'dead')`).Scan(&pending, &dead)
	return pending, dead, s.fail("count deliveries", err)
}

func collectTimers(rows pgx.Rows) ([]hourglass.DeliveryTimer, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.DeliveryTimer, error) {
		var id, at int64
		err := row.Scan(&id, &at)
		return hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}, err
	})
}

// DueDeliveries implements hourglass.DeliveryStore: one range of the
// (state, next_attempt_at, id) index. Ids are not in commit order; the
// cursor is the due time.
func (s *Store) DueDeliveries(ctx context.Context, p hourglass.DueDeliveriesParams) ([]hourglass.DeliveryTimer, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, next_attempt_at FROM webhook_deliveries
WHERE state = 'pending' AND (next_attempt_at, id) > ($1, $2) AND next_attempt_at <= $3 AND (($5::bigint >> (order_id % 64)::int) & 1) = 1
ORDER BY next_attempt_at, id LIMIT $4`, hourglass.UnixMilli(p.After), p.AfterID, hourglass.UnixMilli(p.Until), p.Limit, p.Parts.Mask())
	if err != nil {
		return nil, s.fail("due deliveries", err)
	}
	out, err := collectTimers(rows)
	return out, s.fail("due deliveries", err)
}

// PendingDelivery implements hourglass.DeliveryStore (PendingDeliveries of
// one). Errors: not_found, unavailable.
func (s *Store) PendingDelivery(ctx context.Context, id int64) (hourglass.PendingDelivery, error) {
	return hourglass.OnePending(ctx, s.PendingDeliveries, id)
}

// PendingDeliveries implements hourglass.DeliveryStore, in one query: each
// id is one primary-key look-up (a LATERAL subquery, OFFSET 0 so the
// planner keeps it one), whatever the statistics say. With
// "d.id = ANY($1) AND d.state = 'pending'" the planner, whose statistics
// (or the plan it had cached) still counted a few hundred pending rows
// after a burst's fan-out wrote 100,000, ANDed a bitmap of every pending
// row with the ids': 40 ms a read of 8 deliveries instead of about 1 ms,
// and a burst's deliveries ran at 300 a second (docs/benchmarks/
// webhooks.md). An
// order event's body is rendered from the order's current row as of the
// event (hourglass.Order.AsOf), as store/sqlite renders it, once per event
// in the batch; a timer event's is the one stored when the timer fired.
// Errors: invalid_argument, unavailable.
func (s *Store) PendingDeliveries(ctx context.Context, ids []int64) ([]hourglass.PendingDelivery, error) {
	if err := hourglass.CheckPendingBatch(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+orderColumns+`, d.id, d.webhook_id, d.order_id, w.url, w.secret, e.id, e.type, e.created_at, e.body,
	d.attempts, d.next_attempt_at, b.id, b.next_attempt_at
FROM unnest($1::bigint[]) AS want(id)
CROSS JOIN LATERAL (SELECT * FROM webhook_deliveries x WHERE x.id = want.id OFFSET 0) d
JOIN webhooks w ON w.id = d.webhook_id JOIN events e ON e.seq = d.event_seq
LEFT JOIN orders o ON o.id = d.order_id AND e.body IS NULL
LEFT JOIN LATERAL (SELECT id, next_attempt_at FROM webhook_deliveries b
	WHERE b.webhook_id = d.webhook_id AND b.order_id = d.order_id AND b.event_seq < d.event_seq AND b.state = 'pending'
	ORDER BY b.event_seq LIMIT 1) b ON true
WHERE d.state = 'pending'`, ids)
	if err != nil {
		return nil, s.fail("get deliveries", err)
	}
	defer rows.Close()
	out := make([]hourglass.PendingDelivery, 0, len(ids))
	bodies := map[string][]byte{} // by event id
	for rows.Next() {
		var (
			d                    hourglass.PendingDelivery
			ord                  orderRow
			typ                  string
			body                 *string
			createdAt, next      int64
			blockedID, blockedAt *int64
		)
		if err := rows.Scan(ord.dest(&d.ID, &d.WebhookID, &d.OrderID, &d.URL, &d.Secret, &d.EventID, &typ, &createdAt, &body,
			&d.Attempts, &next, &blockedID, &blockedAt)...); err != nil {
			return nil, s.fail("get deliveries", err)
		}
		d.EventType = hourglass.EventType(typ)
		d.NextAttemptAt = hourglass.FromUnixMilli(next)
		d.EventCreatedAt = hourglass.FromUnixMilli(createdAt)
		switch b, ok := bodies[d.EventID]; {
		case ok:
			d.Body = b
		case body != nil:
			d.Body = []byte(*body)
		default:
			o, found, err := ord.order()
			if err != nil {
				return nil, s.fail("get deliveries", err)
			}
			if !found { // cannot happen: orders are never deleted
				return nil, fmt.Errorf("postgres: get delivery %d: order %d of event %s not found", d.ID, d.OrderID, d.EventID)
			}
			d.Body = renderEvent(d.EventID, d.EventType, createdAt, o)
		}
		bodies[d.EventID] = d.Body
		if blockedID != nil {
			d.BlockedBy = hourglass.DeliveryTimer{ID: *blockedID, At: hourglass.FromUnixMilli(*blockedAt)}
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("get deliveries", err)
	}
	return out, nil
}

// renderEvent returns the JSON body of an event: current is the order's row
// as it is now, seen as of the event (hourglass.Order.AsOf).
func renderEvent(id string, typ hourglass.EventType, createdAtMs int64, current hourglass.Order) []byte {
	return hourglass.MarshalEvent(hourglass.Event{
		ID:        id,
		Type:      typ,
		CreatedAt: hourglass.FromUnixMilli(createdAtMs),
		Order:     current.AsOf(typ),
	})
}

// NextDelivery implements hourglass.DeliveryStore: the head of the (webhook,
// order) stream index.
func (s *Store) NextDelivery(ctx context.Context, webhookID, orderID int64) (hourglass.DeliveryTimer, bool, error) {
	var id, at int64
	err := s.pool.QueryRow(ctx, `SELECT id, next_attempt_at FROM webhook_deliveries
WHERE webhook_id = $1 AND order_id = $2 AND state = 'pending' ORDER BY event_seq LIMIT 1`, webhookID, orderID).Scan(&id, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return hourglass.DeliveryTimer{}, false, nil
	}
	if err != nil {
		return hourglass.DeliveryTimer{}, false, s.fail("next delivery", err)
	}
	return hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}, true, nil
}

// PruneEvents implements hourglass.DeliveryStore. Events still referenced by
// a pending delivery or a dead letter, whose deliveries are still to be
// created (fanout_pending), or not published by an event sink yet
// (sinkHoldSQL), are kept whatever their age.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int
	err := s.retry(ctx, func() error {
		ct, err := s.pool.Exec(ctx, `DELETE FROM events WHERE seq IN (
	SELECT e.seq FROM events e WHERE e.created_at < $1
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = e.seq)
	AND NOT EXISTS (SELECT 1 FROM fanout_pending p WHERE e.seq = ANY (p.seqs))
	AND `+sinkHoldSQL+`
	ORDER BY e.created_at LIMIT $2)`, hourglass.UnixMilli(before), limit)
		n = int(ct.RowsAffected())
		return err
	})
	if err != nil {
		return 0, s.fail("prune events", err)
	}
	return n, nil
}

// DeliveriesCreated implements hourglass.DeliveryStore. It fires after this
// store value's commits that created deliveries and, through LISTEN/NOTIFY,
// after any other store value's or process's on the same database and
// schema. It is a hint: it also fires after the listener reconnects.
func (s *Store) DeliveriesCreated() <-chan struct{} { return s.w.DeliveriesCreated() }

// listen keeps one connection, outside the pool, listening on the store's
// NOTIFY channels (deliveries, created orders), reconnecting with backoff
// until ctx ends. ready is closed after the first attempt, so Open can
// return with the listener in place.
func (s *Store) listen(ctx context.Context, ready chan<- struct{}) {
	defer s.wg.Done()
	backoff := timing.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	first := true
	for {
		err := s.listenOnce(ctx, func() {
			backoff.Reset()
			if first {
				first = false
				close(ready)
			} else {
				// Notifications may have been missed while down.
				s.w.NotifyDeliveries()
				s.watches.push(nil, true)
				s.wakeRequests()
			}
		})
		if first {
			first = false
			close(ready)
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next()
		s.log.Warn("postgres: the NOTIFY listener lost its connection; reconnecting", "err", scrubErr(err, s.cfg.URL), "in", wait)
		if timing.Sleep(ctx, hourglass.SystemClock{}, wait) != nil {
			return
		}
	}
}

func scrubErr(err error, url string) string {
	if err == nil {
		return ""
	}
	return scrub(err.Error(), url)
}

// listenOnce connects, LISTENs on the three channels (then calls listening) and
// forwards notifications until the connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// One simple-protocol query of three statements: one round trip.
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()+"; LISTEN "+pgx.Identifier{s.createdChannel}.Sanitize()+
		"; LISTEN "+pgx.Identifier{s.requestsChannel}.Sanitize()); err != nil {
		return err
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case s.createdChannel:
			s.onCreated(n.Payload)
		case s.requestsChannel:
			s.wakeRequests()
		default:
			s.w.NotifyDeliveries()
		}
	}
}
