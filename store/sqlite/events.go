package sqlite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"zombiezen.com/go/sqlite"
)

// writeEvent records that o has just entered its current state: an event row
// and, for each webhook subscribed to the event's type, a pending delivery
// due now. It runs inside the transition's own write op, so the change, its
// event and its deliveries commit together or not at all (a transactional
// outbox). The event's body (with the order snapshot) is rendered when it is
// read: see renderEvent. It returns the number of deliveries created.
func (s *Store) writeEvent(conn *sqlite.Conn, nowMs int64, o hourglass.Order) (int, error) {
	typ := hourglass.EventFor(o.Status)
	if typ == "" {
		return 0, fmt.Errorf("sqlite: write event: order %d has no event for status %q", o.ID, o.Status)
	}
	return s.writeOrderEvent(conn, nowMs, typ, o, false)
}

// writeOrderEvent is writeEvent for an event of type typ; withBody stores
// the event's body with it (order.extended: the deadline it set must
// survive a later extension, see hourglass.Order.AsOf).
func (s *Store) writeOrderEvent(conn *sqlite.Conn, nowMs int64, typ hourglass.EventType, o hourglass.Order, withBody bool) (int, error) {
	id := hourglass.NewEventID()
	stmt := conn.Prep(`INSERT INTO events (id, type, order_id, created_at) VALUES (?1, ?2, ?3, ?4)`)
	if withBody {
		stmt = conn.Prep(`INSERT INTO events (id, type, order_id, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5)`)
		stmt.BindText(5, string(sqlq.RenderEvent(id, typ, nowMs, o)))
	}
	stmt.BindText(1, id)
	stmt.BindText(2, string(typ))
	stmt.BindInt64(3, o.ID)
	stmt.BindInt64(4, nowMs)
	if _, err := step(stmt, nil); err != nil {
		return 0, fmt.Errorf("sqlite: write %s event of order %d: %w", typ, o.ID, err)
	}
	seq := conn.LastInsertRowID()
	if s.webhookCount(conn) <= 0 {
		return 0, nil // no webhook: nothing to fan out to (the common case, made cheap)
	}
	// One seek per subscribed type: the webhooks of this type, then those of
	// "*". A webhook subscribes to "*" alone or to distinct types, so each
	// matches once. (DISTINCT, ORDER BY or IN would cost a temporary table
	// per event.) OR FAIL: no statement journal, as in fanOutEvents.
	fanned := 0
	for _, t := range [...]string{string(typ), string(hourglass.EventTypeAll)} {
		stmt = conn.Prep(`INSERT OR FAIL INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT webhook_id, ?1, ?2, 'pending', 0, ?3 FROM webhook_subscriptions WHERE type = ?4`)
		stmt.BindInt64(1, seq)
		stmt.BindInt64(2, o.ID)
		stmt.BindInt64(3, nowMs)
		stmt.BindText(4, t)
		if _, err := step(stmt, nil); err != nil {
			return 0, fmt.Errorf("sqlite: fan out %s event of order %d: %w", typ, o.ID, err)
		}
		fanned += conn.Changes()
	}
	return fanned, nil
}

// webhookCounter counts webhooks so that writes skip the fan-out query when
// there are none. It may count too many (then a fan-out finds nothing),
// never too few: a create counts before it is queued, a delete only after it
// committed, and the first count is read from the database before any of
// this process's creates or deletes run. Safe for concurrent use.
type webhookCounter struct {
	once sync.Once
	n    atomic.Int64
	err  error
}

// load reads the count once; read is a query on a connection.
func (c *webhookCounter) load(read func() (int64, error)) error {
	c.once.Do(func() {
		n, err := read()
		if err != nil {
			c.err = err
			n = 1 << 40 // unknown: never skip the fan-out
		}
		c.n.Add(n)
	})
	return c.err
}

func countWebhooks(conn *sqlite.Conn) (int64, error) {
	var n int64
	_, err := step(conn.Prep(`SELECT count(*) FROM webhooks`), func(st *sqlite.Stmt) { n = st.ColumnInt64(0) })
	if err != nil {
		return 0, fmt.Errorf("sqlite: count webhooks: %w", err)
	}
	return n, nil
}

// webhookCount returns the (over-)count of webhooks; conn is the writer's,
// inside its transaction.
func (s *Store) webhookCount(conn *sqlite.Conn) int64 {
	if err := s.webhooks.load(func() (int64, error) { return countWebhooks(conn) }); err != nil {
		s.log.Warn("sqlite: counting webhooks failed; fanning out every event", "err", err)
	}
	return s.webhooks.n.Load()
}

// loadWebhookCount makes sure the count was read, on a read connection,
// before a webhook create or delete changes it.
func (s *Store) loadWebhookCount(ctx context.Context) {
	if err := s.webhooks.load(func() (int64, error) {
		var n int64
		err := s.read(ctx, func(conn *sqlite.Conn) error {
			var err error
			n, err = countWebhooks(conn)
			return err
		})
		return n, err
	}); err != nil {
		s.log.Warn("sqlite: counting webhooks failed; fanning out every event", "err", err)
	}
}

// DeliveriesCreated implements hourglass.DeliveryStore.
func (s *Store) DeliveriesCreated() <-chan struct{} { return s.w.DeliveriesCreated() }
