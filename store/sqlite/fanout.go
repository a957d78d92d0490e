package sqlite

import (
	"context"
	"fmt"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/fanout"
)

// newFanOut returns the loop that creates the webhook deliveries close
// batches of a burst left in fanout_pending (txn.DeferFanOut): one close
// batch per write, in seq order, each once the close path is quiet,
// through the low lane so that API writes go first. The deliveries then
// exist within moments of the burst's end; until then the events are
// durable in the same transactions as the closes, and a restart picks up
// what was left. The table is the state: each look (a deferring close, the
// periodic check, Open) reads it on a reader first.
func (s *Store) newFanOut() *fanout.Loop {
	return fanout.New(fanout.Loop{
		Name:    "sqlite",
		Log:     s.log,
		Queue:   s.w,
		Check:   s.cfg.fanOutCheck,
		Before:  s.cfg.beforeFanOut,
		Count:   s.FanoutPending,
		Counted: s.cfg.ObserveFanoutPending,
		One: func(context.Context) (bool, error) {
			pending, err := s.fanOutsPending()
			if err != nil || !pending {
				return false, err
			}
			created, err := s.fanOutOldest()
			if created > 0 {
				s.w.NotifyDeliveries()
			}
			return true, err
		},
	})
}

// fanOutsPending reports, on a reader, whether fanout_pending has rows: at
// Open and on the periodic check there are usually none, and a write would
// queue behind the API's to find out.
func (s *Store) fanOutsPending() (bool, error) {
	var found bool
	err := s.read(context.Background(), func(conn *sqlite.Conn) error {
		var err error
		found, err = step(conn.Prep(`SELECT 1 FROM fanout_pending LIMIT 1`), nil)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: read deferred fan-outs: %w", err)
	}
	return found, nil
}

// fanOutOldest creates the deliveries of the oldest deferred close batch
// and deletes its fanout_pending row, in one low-lane write, and returns the
// deliveries created.
func (s *Store) fanOutOldest() (created int, err error) {
	err = s.writeLow(context.Background(), func(conn *sqlite.Conn, now time.Time) error {
		created = 0 // the op may be retried alone after a batch failure
		var (
			first, last int64
			typ         string
		)
		found, err := step(conn.Prep(`SELECT first_seq, last_seq, type FROM fanout_pending ORDER BY first_seq LIMIT 1`), func(st *sqlite.Stmt) {
			first, last, typ = st.ColumnInt64(0), st.ColumnInt64(1), st.ColumnText(2)
		})
		if err != nil {
			return fmt.Errorf("sqlite: read deferred fan-outs: %w", err)
		}
		if !found {
			return nil
		}
		if created, err = fanOutEvents(conn, hourglass.UnixMilli(now), hourglass.EventType(typ), first, last); err != nil {
			return err
		}
		del := conn.Prep(`DELETE FROM fanout_pending WHERE first_seq = ?1`)
		del.BindInt64(1, first)
		if _, err := step(del, nil); err != nil {
			return fmt.Errorf("sqlite: delete deferred fan-out %d..%d: %w", first, last, err)
		}
		return nil
	})
	return created, err
}

// fanOutEvents creates the deliveries of the events with a seq in [first,
// last], all of type typ, to every webhook subscribed to typ or "*", with
// one INSERT … SELECT per subscribed type. It returns the number created.
//
// Every event with a seq in [first, last] must be of type typ: a deferring
// batch wrote them one after the other (txn.DeferFanOut). Streams are
// ordered by event seq, so deliveries created later still keep each
// (webhook, order) stream in event order. OR FAIL: the statement needs no
// statement journal (the op's failure rolls its transaction back).
func fanOutEvents(conn *sqlite.Conn, nowMs int64, typ hourglass.EventType, first, last int64) (int, error) {
	fanned := 0
	for _, t := range [...]string{string(typ), string(hourglass.EventTypeAll)} {
		stmt := conn.Prep(`INSERT OR FAIL INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT w.webhook_id, e.seq, e.order_id, 'pending', 0, ?3 FROM events e, webhook_subscriptions w
WHERE e.seq BETWEEN ?1 AND ?2 AND w.type = ?4 ORDER BY e.seq, w.webhook_id`)
		stmt.BindInt64(1, first)
		stmt.BindInt64(2, last)
		stmt.BindInt64(3, nowMs)
		stmt.BindText(4, t)
		if _, err := step(stmt, nil); err != nil {
			return 0, fmt.Errorf("sqlite: fan out %d %s events: %w", last-first+1, typ, err)
		}
		fanned += conn.Changes()
	}
	return fanned, nil
}
