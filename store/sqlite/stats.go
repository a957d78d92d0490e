package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
)

// Read-only statistics for alerts and the dashboard. Each is one query on a
// pooled read connection (it never waits for the writer) and reads only the
// (status, deadline) index, never the orders table itself.

// OrderCounts returns how many orders are in each state at now, as the API
// shows them (hourglass.Order.View): a pending order at or past its deadline
// counts as closed even before the closer has committed. Every state is
// present in the map, zero when there is none.
//
// Cost: one count per state over its range of the (status, deadline)
// index, plus one over the overdue pending range: O(orders) index entries
// stepped, about 65 ms per million orders here (a GROUP BY over the index
// is 2 to 3 times slower). Callers that poll it (the dashboard) cache the
// result.
func (s *Store) OrderCounts(ctx context.Context, now time.Time) (map[hourglass.State]int64, error) {
	out := make(map[hourglass.State]int64, len(hourglass.States()))
	// One read transaction: every count sees the same snapshot, so they
	// add up to the number of orders.
	err := s.readTx(ctx, func(conn *sqlite.Conn) error {
		count := conn.Prep(`SELECT count(*) FROM orders INDEXED BY orders_status_deadline WHERE status = ?1`)
		for _, st := range hourglass.States() {
			count.BindText(1, string(st))
			var n int64
			if _, err := step(count, func(stmt *sqlite.Stmt) { n = stmt.ColumnInt64(0) }); err != nil {
				return fmt.Errorf("sqlite: count %s orders: %w", st, err)
			}
			out[st] = n
		}
		overdue := conn.Prep(`SELECT count(*) FROM orders INDEXED BY orders_status_deadline
WHERE status = 'pending_payment' AND deadline <= ?1`)
		overdue.BindInt64(1, hourglass.UnixMilli(now))
		var n int64
		if _, err := step(overdue, func(stmt *sqlite.Stmt) { n = stmt.ColumnInt64(0) }); err != nil {
			return fmt.Errorf("sqlite: count overdue orders: %w", err)
		}
		out[hourglass.StatePendingPayment] -= n
		out[hourglass.StateClosed] += n
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CountPendingDue returns how many pending orders have a deadline at or
// before until — the close backlog when until is now — counting at most
// limit of them (limit <= 0 means no cap), so that a huge backlog costs a
// bounded index range scan.
func (s *Store) CountPendingDue(ctx context.Context, until time.Time, limit int) (int, error) {
	var n int
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		stmt := conn.Prep(`SELECT count(*) FROM (SELECT 1 FROM orders INDEXED BY orders_status_deadline
WHERE status = 'pending_payment' AND deadline <= ?1 LIMIT ?2)`)
		stmt.BindInt64(1, hourglass.UnixMilli(until))
		stmt.BindInt64(2, int64(limit))
		if limit <= 0 {
			stmt.BindInt64(2, -1) // SQLite: a negative LIMIT is no limit
		}
		_, err := step(stmt, func(st *sqlite.Stmt) { n = st.ColumnInt(0) })
		if err != nil {
			return fmt.Errorf("sqlite: count pending due: %w", err)
		}
		return nil
	})
	return n, err
}

// PendingDeadlineBuckets returns n counts of pending orders by deadline:
// bucket i holds those with from + i*width < deadline <= from + (i+1)*width,
// i.e. the orders that will be due in that slice of time. It reads only the
// index range of those deadlines: O(pending orders due in n*width).
// width must be at least a millisecond and n in 1..10000.
func (s *Store) PendingDeadlineBuckets(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	w := width.Milliseconds()
	if w < 1 || n < 1 || n > 10000 {
		return nil, fmt.Errorf("sqlite: pending deadline buckets: width %s and n %d out of range (>= 1ms, 1..10000)", width, n)
	}
	out := make([]int64, n)
	fromMs := hourglass.UnixMilli(from)
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		stmt := conn.Prep(`SELECT (deadline - ?1 - 1) / ?2, count(*) FROM orders INDEXED BY orders_status_deadline
WHERE status = 'pending_payment' AND deadline > ?1 AND deadline <= ?3
GROUP BY 1`)
		defer stmt.Reset()
		stmt.BindInt64(1, fromMs)
		stmt.BindInt64(2, w)
		stmt.BindInt64(3, fromMs+int64(n)*w)
		for {
			row, err := stmt.Step()
			if err != nil {
				return fmt.Errorf("sqlite: pending deadline buckets: %w", err)
			}
			if !row {
				return nil
			}
			if i := stmt.ColumnInt64(0); i >= 0 && i < int64(n) {
				out[i] = stmt.ColumnInt64(1)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
