package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/jackc/pgx/v5"
)

var (
	_ hourglass.StatsStore = (*Store)(nil)
	_ hourglass.Outbox     = (*Store)(nil)
)

// OrderCounts implements hourglass.StatsStore: one statement (one snapshot,
// so the counts add up) of one count per state over its range of the
// (status, deadline, id) index, plus the overdue pending range: O(orders)
// index entries, index-only where the visibility map allows. Callers that
// poll it (the dashboard) cache the result.
func (s *Store) OrderCounts(ctx context.Context, now time.Time) (map[hourglass.State]int64, error) {
	states := hourglass.States()
	var q strings.Builder
	q.WriteString("SELECT ")
	for _, st := range states {
		fmt.Fprintf(&q, "(SELECT count(*) FROM orders WHERE status = '%s'), ", st)
	}
	q.WriteString("(SELECT count(*) FROM orders WHERE status = 'pending_payment' AND deadline <= $1)")
	counts := make([]int64, len(states)+1)
	dest := make([]any, len(counts))
	for i := range counts {
		dest[i] = &counts[i]
	}
	if err := s.pool.QueryRow(ctx, q.String(), hourglass.UnixMilli(now)).Scan(dest...); err != nil {
		return nil, s.fail("count orders", err)
	}
	out := make(map[hourglass.State]int64, len(states))
	for i, st := range states {
		out[st] = counts[i]
	}
	overdue := counts[len(states)]
	out[hourglass.StatePendingPayment] -= overdue
	out[hourglass.StateClosed] += overdue
	return out, nil
}

// CountPendingDue implements hourglass.StatsStore: a bounded range of the
// (status, deadline, id) index (limit <= 0: no cap).
func (s *Store) CountPendingDue(ctx context.Context, until time.Time, limit int) (int, error) {
	var lim any
	if limit > 0 {
		lim = limit
	}
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM orders
WHERE status = 'pending_payment' AND deadline <= $1 LIMIT $2::bigint) x`, hourglass.UnixMilli(until), lim).Scan(&n)
	return n, s.fail("count pending due", err)
}

// PendingDeadlineBuckets implements hourglass.StatsStore: bucket i holds the
// pending orders with from + i*width < deadline <= from + (i+1)*width; it
// reads only that range of the index.
func (s *Store) PendingDeadlineBuckets(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	w := width.Milliseconds()
	if w < 1 || n < 1 || n > 10000 {
		return nil, fmt.Errorf("postgres: pending deadline buckets: width %s and n %d out of range (>= 1ms, 1..10000)", width, n)
	}
	fromMs := hourglass.UnixMilli(from)
	rows, err := s.pool.Query(ctx, `SELECT (deadline - $1 - 1) / $2, count(*) FROM orders
WHERE status = 'pending_payment' AND deadline > $1 AND deadline <= $3 GROUP BY 1`, fromMs, w, fromMs+int64(n)*w)
	if err != nil {
		return nil, s.fail("pending deadline buckets", err)
	}
	out := make([]int64, n)
	var i, c int64
	_, err = pgx.ForEachRow(rows, []any{&i, &c}, func() error {
		if i >= 0 && i < int64(n) {
			out[i] = c
		}
		return nil
	})
	if err != nil {
		return nil, s.fail("pending deadline buckets", err)
	}
	return out, nil
}

// OutboxBatch implements hourglass.Outbox: up to limit unsent timers, oldest
// order first.
func (s *Store) OutboxBatch(ctx context.Context, limit int, parts hourglass.Parts) ([]hourglass.DueItem, error) {
	rows, err := s.pool.Query(ctx, `SELECT order_id, deadline FROM timer_outbox
WHERE (($2::bigint >> (order_id % 64)::int) & 1) = 1 ORDER BY order_id LIMIT $1`, max(limit, 0), parts.Mask())
	if err != nil {
		return nil, s.fail("read outbox", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.DueItem, error) {
		var id, deadline int64
		err := row.Scan(&id, &deadline)
		return hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(deadline)}, err
	})
	return out, s.fail("read outbox", err)
}

// OutboxDone implements hourglass.Outbox. Idempotent.
func (s *Store) OutboxDone(ctx context.Context, published []hourglass.DueItem) error {
	if len(published) == 0 {
		return nil
	}
	ids, deadlines := make([]int64, len(published)), make([]int64, len(published))
	for i, t := range published {
		ids[i], deadlines[i] = t.ID, hourglass.UnixMilli(t.At)
	}
	err := s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, `DELETE FROM timer_outbox o USING unnest($1::bigint[], $2::bigint[]) AS p(id, deadline)
WHERE o.order_id = p.id AND o.deadline = p.deadline`, ids, deadlines)
		return err
	})
	return s.fail("outbox done", err)
}
