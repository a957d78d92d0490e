package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// BenchmarkRemindOrdersBurst sends the reminders of a backlog of orders all
// reminded at one instant through RemindOrders, in batches of the given
// size with the given callers, and reports reminders per second; the same
// orders' closes (CloseOrders, with the same batches and callers) are
// measured alternately, so the two per-item costs compare within one run
// (as SQLite's benchmark of the same name):
//
//	go test -run '^$' -bench RemindOrdersBurst -benchtime 1x ./store/mysql/
func BenchmarkRemindOrdersBurst(b *testing.B) {
	hourglasstest.RemindBurstBench(b, []hourglasstest.BurstShape{{Batch: 512, Callers: 2}, {Batch: 1024, Callers: 2}, {Batch: 2048, Callers: 2}, {Batch: 1024, Callers: 4}},
		func(tb testing.TB, clock *hourglasstest.Clock) *Store {
			s, err := Open(context.Background(), Config{URL: mytest.NewDatabase(tb), Clock: clock})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { s.Close() })
			return s
		}, seedRemindBurst)
}

// seedRemindBurst inserts n pending orders of one unit of a new product
// sku, reminded at remindAt and due at deadline, with one statement, and
// returns the first one's id (the ids are consecutive).
func seedRemindBurst(tb testing.TB, s *Store, sku string, n int, remindAt, deadline time.Time) (firstID int64) {
	tb.Helper()
	ctx := context.Background()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: sku, Name: sku, Category: "physical", Available: int64(n)}); err != nil {
		tb.Fatal(err)
	}
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) + 1 FROM orders`).Scan(&firstID); err != nil {
		tb.Fatal(err)
	}
	ms := hourglass.UnixMilli
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO orders (id, user_id, status, items, created_at, deadline, remind_at, remind_before_ms)
SELECT ? + g - 1, 'burst', 'pending_payment', ?, ?, ?, ?, ? FROM ` + numbers(n),
			[]any{firstID, stored.EncodeItems([]hourglass.Item{{SKU: sku, Quantity: 1}}), ms(remindAt), ms(deadline), ms(remindAt), deadline.Sub(remindAt).Milliseconds()}},
		{`UPDATE products SET available = available - ?, reserved = reserved + ? WHERE sku = ?`, []any{n, n, sku}},
	} {
		if _, err := s.db.ExecContext(ctx, q.sql, q.args...); err != nil {
			tb.Fatalf("%.60s…: %v", q.sql, err)
		}
	}
	return firstID
}
