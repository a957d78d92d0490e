package mysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
)

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

// DeliveriesCreated implements hourglass.DeliveryStore. It fires after this
// store value's commits that created deliveries. MySQL has no NOTIFY:
// deliveries created by other processes (or other store values) are found
// only by the consumer's polling of DueDeliveries, so that polling is what
// bounds their latency.
func (s *Store) DeliveriesCreated() <-chan struct{} { return s.w.DeliveriesCreated() }

// OrderEvents implements hourglass.Database, for an order's id or a
// timer's (whose timer.fired events keep their body). It scans the events
// table (no index by order keeps every transition's insert cheap): for
// tests and debugging. An order's events are rendered from its row read
// after them, so that row is at or after each event's transition
// (hourglass.Order.AsOf); an order that does not exist has none.
func (s *Store) OrderEvents(ctx context.Context, orderID int64) ([]hourglass.EventRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, id, type, created_at, body FROM events WHERE order_id = ? ORDER BY seq`, orderID)
	if err != nil {
		return nil, fail(fmt.Sprintf("order %d events", orderID), err)
	}
	defer rows.Close()
	var (
		out    []hourglass.EventRecord
		render bool // an event without a body: an order's
	)
	for rows.Next() {
		var (
			e       hourglass.EventRecord
			typ     string
			created int64
		)
		if err := rows.Scan(&e.Seq, &e.ID, &typ, &created, &e.Body); err != nil {
			return nil, fail(fmt.Sprintf("order %d events", orderID), err)
		}
		e.Type, e.OrderID, e.CreatedAt = hourglass.EventType(typ), orderID, hourglass.FromUnixMilli(created)
		render = render || e.Body == nil
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fail(fmt.Sprintf("order %d events", orderID), err)
	}
	if !render {
		return out, nil
	}
	o, err := s.Order(ctx, orderID)
	if hourglass.ErrorCode(err) == hourglass.CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Body == nil {
			out[i].Body = renderEvent(out[i].ID, out[i].Type, hourglass.UnixMilli(out[i].CreatedAt), o)
		}
	}
	return out, nil
}

// PruneEvents implements hourglass.DeliveryStore: one DELETE over the
// events_created_at index. Events still referenced by a pending delivery or
// a dead letter, whose deliveries are still to be created (fanout_pending),
// or not published by an event sink yet (sinkHoldSQL), are kept whatever
// their age.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.retryStatement(ctx, "prune events", func() error {
		res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE created_at < ?
AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = events.seq)
AND NOT EXISTS (SELECT 1 FROM fanout_pending p WHERE FIND_IN_SET(events.seq, p.seqs))
AND `+sinkHoldSQL+`
ORDER BY created_at LIMIT ?`, hourglass.UnixMilli(before), hourglass.UnixMilli(before), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// retryStatement runs one autocommit statement, again after a lost race
// (retryPolicy).
func (s *Store) retryStatement(ctx context.Context, op string, fn func() error) error {
	err := s.retry(ctx, fn)
	var he *hourglass.Error
	if errors.As(err, &he) {
		return err
	}
	return fail(op, err)
}
