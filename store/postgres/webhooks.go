package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/timing"
	"github.com/jackc/pgx/v5"
)

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
			d.Body = sqlq.RenderEvent(d.EventID, d.EventType, createdAt, o)
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
