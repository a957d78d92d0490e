package mysql

import (
	"context"
	"errors"
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
