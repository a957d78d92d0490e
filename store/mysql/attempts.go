package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/hourglass/hourglass"
)

// RecordAttempt implements hourglass.DeliveryStore: a compare-and-set on
// (state 'pending', attempts); false when another attempt was recorded
// first or the delivery is gone. Attempts are group-committed by the
// writers in their low lane (batch.go, step 7): a delivery backlog's
// bookkeeping shares transactions instead of committing once per attempt,
// and takes only the room that closes and API writes leave.
func (s *Store) RecordAttempt(ctx context.Context, r hourglass.AttemptResult) (hourglass.AttemptRecord, error) {
	res := s.submit(ctx, &op{kind: opAttempt, attempt: r})
	return res.record, res.err
}

// delivery is a pending delivery row an attempt names, locked by the batch
// and changed in memory.
type delivery struct {
	attempts   int
	gone, dead bool // deleted (delivered); a dead letter
	touched    bool
	nextAt     int64
	lastError  []byte
}

// recordAttempts applies the batch's attempts (ops of kind opAttempt that
// are live) in queue order on their delivery rows, locked by id, and writes
// each changed row once: a delivered one deleted, a retried or dead one
// updated. Each recorded attempt that resolves its delivery gets the next
// delivery of its (webhook, order) stream, read after the writes.
func recordAttempts(ctx context.Context, tx *sql.Tx, ops []*op, results []opResult, nowMs int64) error {
	var ids []int64
	for _, o := range ops {
		if o.kind == opAttempt {
			ids = append(ids, o.attempt.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, attempts, next_attempt_at FROM webhook_deliveries
WHERE id IN (`+placeholders(len(args))+`) AND state = 'pending' ORDER BY id FOR UPDATE`, args...)
	if err != nil {
		return fmt.Errorf("lock deliveries: %w", err)
	}
	locked := map[int64]*delivery{}
	for rows.Next() {
		var (
			id int64
			d  delivery
		)
		if err := rows.Scan(&id, &d.attempts, &d.nextAt); err != nil {
			rows.Close()
			return fmt.Errorf("lock deliveries: %w", err)
		}
		locked[id] = &d
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock deliveries: %w", err)
	}

	type stream struct{ webhook, order int64 }
	var resolved []int // ops whose recorded attempt resolved their delivery
	for i, o := range ops {
		if o.kind != opAttempt {
			continue
		}
		r := o.attempt
		d := locked[r.ID]
		if d == nil || d.gone || d.dead || d.attempts != r.Attempts {
			continue // not recorded: another attempt was first, or it is gone
		}
		results[i].record.Recorded = true
		d.touched = true
		msg := r.Error
		if len(msg) > maxLastError {
			msg = msg[:maxLastError]
		}
		switch {
		case r.OK:
			d.gone = true
		case r.RetryAt.IsZero():
			d.dead, d.attempts, d.lastError = true, d.attempts+1, []byte(msg)
		default:
			d.attempts, d.lastError, d.nextAt = d.attempts+1, []byte(msg), hourglass.UnixMilli(r.RetryAt)
		}
		if r.Resolves() {
			resolved = append(resolved, i)
		}
	}

	var gone []any
	for _, id := range ids {
		d := locked[id]
		switch {
		case d == nil || !d.touched:
		case d.gone:
			gone = append(gone, id)
		case d.dead:
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET state = 'dead', attempts = ?, last_error = ?, failed_at = ? WHERE id = ?`,
				d.attempts, d.lastError, nowMs, id); err != nil {
				return fmt.Errorf("record attempts: %w", err)
			}
		default:
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET attempts = ?, last_error = ?, next_attempt_at = ? WHERE id = ?`,
				d.attempts, d.lastError, d.nextAt, id); err != nil {
				return fmt.Errorf("record attempts: %w", err)
			}
		}
	}
	if len(gone) > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id IN (`+placeholders(len(gone))+`)`, gone...); err != nil {
			return fmt.Errorf("record attempts: %w", err)
		}
	}
	if len(resolved) == 0 {
		return nil
	}

	// The streams' heads, after the writes.
	seen := map[stream]bool{}
	var where []any
	for _, i := range resolved {
		r := ops[i].attempt
		st := stream{r.WebhookID, r.OrderID}
		if !seen[st] {
			seen[st] = true
			where = append(where, st.webhook, st.order)
		}
	}
	rows, err = tx.QueryContext(ctx, `SELECT webhook_id, order_id, id, next_attempt_at FROM webhook_deliveries FORCE INDEX (webhook_deliveries_stream)
WHERE state = 'pending' AND (`+repeatJoin(`(webhook_id = ? AND order_id = ?)`, " OR ", len(where)/2)+`)
ORDER BY webhook_id, order_id, event_seq`, where...)
	if err != nil {
		return fmt.Errorf("next deliveries: %w", err)
	}
	heads := map[stream]hourglass.DeliveryTimer{}
	for rows.Next() {
		var (
			st     stream
			id, at int64
		)
		if err := rows.Scan(&st.webhook, &st.order, &id, &at); err != nil {
			rows.Close()
			return fmt.Errorf("next deliveries: %w", err)
		}
		if _, ok := heads[st]; !ok { // the first of its stream: the earliest event
			heads[st] = hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("next deliveries: %w", err)
	}
	for _, i := range resolved {
		r := ops[i].attempt
		results[i].record.Next = heads[stream{r.WebhookID, r.OrderID}]
	}
	return nil
}

// repeatJoin returns n copies of s joined by sep.
func repeatJoin(s, sep string, n int) string {
	out := make([]byte, 0, n*(len(s)+len(sep)))
	for i := range n {
		if i > 0 {
			out = append(out, sep...)
		}
		out = append(out, s...)
	}
	return string(out)
}
