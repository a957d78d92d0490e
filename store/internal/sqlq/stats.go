package sqlq

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Read-only statistics for alerts and the dashboard: each is one statement
// (one snapshot) over the orders' (status, deadline) index.

// OrderCounts implements hourglass.StatsStore: one count per state over its
// range of the index, plus the overdue pending range (shown as closed, as
// hourglass.Order.View shows them), in one statement so the counts add up.
// Every state is present, zero when there is none. O(orders) index entries:
// callers that poll it (the dashboard) cache the result.
func (s *Store) OrderCounts(ctx context.Context, now time.Time) (map[hourglass.State]int64, error) {
	states := hourglass.States()
	from := s.d.From("orders", "orders_status_deadline")
	var b strings.Builder
	b.WriteString("SELECT ")
	for _, st := range states {
		fmt.Fprintf(&b, "(SELECT count(*) FROM %s WHERE status = '%s'), ", from, st)
	}
	fmt.Fprintf(&b, "(SELECT count(*) FROM %s WHERE status = 'pending_payment' AND deadline <= ?)", from)
	counts := make([]int64, len(states)+1)
	dest := make([]any, len(counts))
	for i := range counts {
		dest[i] = &counts[i]
	}
	err := s.read(ctx, "count orders", func(x q) error {
		_, err := x.row(ctx, b.String(), []any{hourglass.UnixMilli(now)}, dest...)
		return err
	})
	if err != nil {
		return nil, err
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

// CountPendingDue implements hourglass.StatsStore: how many pending orders
// are due at or before until (the close backlog when until is now), at most
// limit of them when limit > 0, so a huge backlog costs a bounded range.
func (s *Store) CountPendingDue(ctx context.Context, until time.Time, limit int) (int, error) {
	query := `SELECT count(*) FROM ` + s.d.From("orders", "orders_status_deadline") +
		` WHERE status = 'pending_payment' AND deadline <= ?`
	args := []any{hourglass.UnixMilli(until)}
	if limit > 0 {
		query = `SELECT count(*) FROM (SELECT 1 FROM ` + s.d.From("orders", "orders_status_deadline") +
			` WHERE status = 'pending_payment' AND deadline <= ? LIMIT ?) t`
		args = append(args, limit)
	}
	var n int
	err := s.read(ctx, "count pending due", func(x q) error {
		_, err := x.row(ctx, query, args, &n)
		return err
	})
	return n, err
}

// PendingDeadlineBuckets implements hourglass.StatsStore: bucket i holds the
// pending orders with from + i*width < deadline <= from + (i+1)*width; it
// reads only that range of the index. width must be at least a millisecond
// and n in 1..10000.
func (s *Store) PendingDeadlineBuckets(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	w := width.Milliseconds()
	if w < 1 || n < 1 || n > 10000 {
		return nil, fmt.Errorf("pending deadline buckets: width %s and n %d out of range (>= 1ms, 1..10000)", width, n)
	}
	fromMs := hourglass.UnixMilli(from)
	out := make([]int64, n)
	var i, c int64
	err := s.read(ctx, "pending deadline buckets", func(x q) error {
		return x.each(ctx, `SELECT (deadline - ? - 1) `+s.d.IntDiv+` ? AS bucket, count(*) FROM `+s.d.From("orders", "orders_status_deadline")+`
WHERE status = 'pending_payment' AND deadline > ? AND deadline <= ? GROUP BY bucket`,
			[]any{fromMs, w, fromMs, fromMs + int64(n)*w}, []any{&i, &c}, func() error {
				if i >= 0 && i < int64(n) {
					out[i] = c
				}
				return nil
			})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// OutboxBatch implements hourglass.Outbox: up to limit unsent timers of
// parts, oldest order first.
func (s *Store) OutboxBatch(ctx context.Context, limit int, parts hourglass.Parts) ([]hourglass.DueItem, error) {
	var (
		out    []hourglass.DueItem
		id, at int64
	)
	err := s.read(ctx, "read outbox", func(x q) error {
		out = out[:0]
		return x.each(ctx, `SELECT order_id, deadline FROM timer_outbox WHERE `+s.d.InParts("order_id")+` ORDER BY order_id LIMIT ?`,
			[]any{parts.Mask(), max(limit, 0)}, []any{&id, &at}, func() error {
				out = append(out, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(at)})
				return nil
			})
	})
	return out, err
}

// outboxChunk is how many timers one statement of OutboxDone deletes.
const outboxChunk = 500

// OutboxDone implements hourglass.Outbox: it deletes the published timers,
// outboxChunk per statement, in one transaction. Idempotent.
func (s *Store) OutboxDone(ctx context.Context, published []hourglass.DueItem) error {
	if len(published) == 0 {
		return nil
	}
	return s.write(ctx, "outbox done", Normal, func(x q) error {
		for rest := published; len(rest) > 0; {
			chunk := rest[:min(len(rest), outboxChunk)]
			rest = rest[len(chunk):]
			args := make([]any, 0, 2*len(chunk))
			for _, t := range chunk {
				args = append(args, t.ID, hourglass.UnixMilli(t.At))
			}
			cond := strings.Repeat("(order_id = ? AND deadline = ?) OR ", len(chunk)-1) + "(order_id = ? AND deadline = ?)"
			if _, err := x.exec(ctx, `DELETE FROM timer_outbox WHERE `+cond, args...); err != nil {
				return err
			}
		}
		return nil
	})
}
