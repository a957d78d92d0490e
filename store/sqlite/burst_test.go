package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/internal/stored"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// seedBurst inserts n pending orders for sku (one unit each, reserved) all
// due at deadline, with one set-based statement: a flash sale's backlog
// without n group commits.
func seedBurst(tb testing.TB, s *Store, sku string, n int, deadline time.Time) (firstID int64) {
	tb.Helper()
	ctx := context.Background()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: sku, Name: sku, Category: "physical", Available: int64(n)}); err != nil {
		tb.Fatal(err)
	}
	err := s.write(ctx, func(conn *sqlite.Conn, now time.Time) error {
		var maxID int64
		if _, err := step(conn.Prep(`SELECT coalesce(max(id), 0) FROM orders`), func(st *sqlite.Stmt) { maxID = st.ColumnInt64(0) }); err != nil {
			return err
		}
		firstID = maxID + 1
		if err := sqlitex.Execute(conn, `WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
INSERT INTO orders (user_id, status, items, created_at, deadline) SELECT 'burst', 'pending_payment', ?2, ?3, ?4 FROM k`,
			&sqlitex.ExecOptions{Args: []any{n, stored.EncodeItems([]hourglass.Item{{SKU: sku, Quantity: 1}}), hourglass.UnixMilli(now), hourglass.UnixMilli(deadline)}}); err != nil {
			return err
		}
		return sqlitex.Execute(conn, `UPDATE products SET available = available - ?1, reserved = reserved + ?1 WHERE sku = ?2`,
			&sqlitex.ExecOptions{Args: []any{n, sku}})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return firstID
}

// openAt opens a store in a new directory on clock (nil: the system's),
// closed when the test or benchmark ends.
func openAt(tb testing.TB, clock hourglass.Clock) *Store {
	tb.Helper()
	s, err := Open(Config{Dir: tb.TempDir(), Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// subscribeAll creates n webhooks subscribed to every event, at addresses
// nothing listens on.
func subscribeAll(tb testing.TB, s *Store, n int) {
	tb.Helper()
	for i := range n {
		if _, err := s.CreateWebhook(context.Background(), hourglass.WebhookParams{URL: fmt.Sprintf("http://127.0.0.1:1/%d", i), Secret: "0123456789abcdef", Events: []hourglass.EventType{hourglass.EventTypeAll}}, 100); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkCloseOrdersBurst closes a backlog of orders all due at one
// instant through CloseOrders, in batches of the given size with two
// callers (as the dispatcher's workers do), and reports closes per second.
// It measures the store's half of the close path alone; profile it with
// -cpuprofile to see where a burst's time goes.
func BenchmarkCloseOrdersBurst(b *testing.B) {
	for _, batch := range []int{512, 4096} {
		for _, webhooks := range []int{0, 5} {
			for _, desc := range []bool{false, true} {
				b.Run(fmt.Sprintf("batch=%d/webhooks=%d/descending=%v", batch, webhooks, desc), func(b *testing.B) {
					const n = 100_000
					clock := hourglasstest.NewClock(hourglasstest.Epoch)
					s := openAt(b, clock)
					subscribeAll(b, s, webhooks)
					ctx := context.Background()
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						first := seedBurst(b, s, fmt.Sprintf("SKU%d", b.N), n, clock.Now())
						clock.Advance(time.Millisecond)
						b.StartTimer()
						start := time.Now()
						var wg sync.WaitGroup
						next := make(chan int64)
						for range 2 {
							wg.Go(func() {
								for lo := range next {
									ids := make([]int64, 0, batch)
									for id := lo; id < min(lo+int64(batch), first+n); id++ {
										ids = append(ids, id)
									}
									closed, err := s.CloseOrders(ctx, ids)
									if err != nil || len(closed) != len(ids) {
										b.Errorf("closed %d of %d: %v", len(closed), len(ids), err)
									}
								}
							})
						}
						for i := range (n + batch - 1) / batch {
							lo := first + int64(i*batch)
							if desc { // batches in descending order, as a LIFO timer slot fires them
								lo = first + int64(((n+batch-1)/batch-1-i)*batch)
							}
							next <- lo
						}
						close(next)
						wg.Wait()
						b.ReportMetric(n/time.Since(start).Seconds(), "closes/s")
					}
				})
			}
		}
	}
}
