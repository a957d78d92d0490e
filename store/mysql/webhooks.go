package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// maxLastError bounds the stored error text of a failed attempt (a BLOB).
const maxLastError = 60000

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
			d.Body = sqlq.RenderEvent(d.EventID, d.EventType, createdAt, o)
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
