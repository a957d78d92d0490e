package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
)

// Read-only statistics for alerts and the dashboard; each is one statement
// (one snapshot) that reads only the (status, deadline) index.

// OrderCounts implements hourglass.StatsStore: one GROUP BY over the
// covering (status, deadline) index, O(orders) index entries, which also
// counts the overdue pending ones (shown as closed). Callers that poll it
// cache the result.
func (s *Store) OrderCounts(ctx context.Context, now time.Time) (map[hourglass.State]int64, error) {
	out := make(map[hourglass.State]int64, len(hourglass.States()))
	for _, st := range hourglass.States() {
		out[st] = 0
	}
	err := eachRow(ctx, s.db, `SELECT status, COUNT(*), SUM(deadline <= ?) FROM orders FORCE INDEX (orders_status_deadline) GROUP BY status`,
		[]any{hourglass.UnixMilli(now)}, func(rows *sql.Rows) error {
			var (
				st         string
				n, overdue int64
			)
			if err := rows.Scan(&st, &n, &overdue); err != nil {
				return err
			}
			out[hourglass.State(st)] += n
			if hourglass.State(st) == hourglass.StatePendingPayment {
				out[hourglass.StatePendingPayment] -= overdue
				out[hourglass.StateClosed] += overdue
			}
			return nil
		})
	if err != nil {
		return nil, fail("count orders", err)
	}
	return out, nil
}

// CountPendingDue implements hourglass.StatsStore: a range of the index,
// cut at limit rows when limit > 0.
func (s *Store) CountPendingDue(ctx context.Context, until time.Time, limit int) (int, error) {
	q := `SELECT COUNT(*) FROM orders WHERE status = 'pending_payment' AND deadline <= ?`
	args := []any{hourglass.UnixMilli(until)}
	if limit > 0 {
		q = `SELECT COUNT(*) FROM (SELECT 1 FROM orders WHERE status = 'pending_payment' AND deadline <= ? LIMIT ?) t`
		args = append(args, limit)
	}
	var n int
	err := s.db.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, fail("count pending due", err)
}

// PendingDeadlineBuckets implements hourglass.StatsStore: bucket i holds
// the pending orders with from + i*width < deadline <= from + (i+1)*width;
// one GROUP BY over that range of the index.
func (s *Store) PendingDeadlineBuckets(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	w := width.Milliseconds()
	if w < 1 || n < 1 || n > 10000 {
		return nil, fmt.Errorf("mysql: pending deadline buckets: width %s and n %d out of range (>= 1ms, 1..10000)", width, n)
	}
	fromMs := hourglass.UnixMilli(from)
	out := make([]int64, n)
	err := eachRow(ctx, s.db, `SELECT (deadline - ? - 1) DIV ? AS bucket, COUNT(*) FROM orders
WHERE status = 'pending_payment' AND deadline > ? AND deadline <= ? GROUP BY bucket`, []any{fromMs, w, fromMs, fromMs + int64(n)*w}, func(rows *sql.Rows) error {
		var i, c int64
		if err := rows.Scan(&i, &c); err != nil {
			return err
		}
		if i >= 0 && i < int64(n) {
			out[i] = c
		}
		return nil
	})
	if err != nil {
		return nil, fail("pending deadline buckets", err)
	}
	return out, nil
}
