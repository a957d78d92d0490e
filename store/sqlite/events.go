package sqlite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"zombiezen.com/go/sqlite"
)

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
