package mysql

import (
	"context"

	"github.com/hourglass/hourglass"
)

// OutboxBatch implements hourglass.Outbox: up to limit unsent timers,
// oldest order first. Rows are written in each order's transaction when
// Config.Outbox is set.
func (s *Store) OutboxBatch(ctx context.Context, limit int, parts hourglass.Parts) ([]hourglass.DueItem, error) {
	out, err := collect(ctx, s.db, `SELECT order_id, deadline FROM timer_outbox
WHERE ((? >> (order_id % 64)) & 1) = 1 ORDER BY order_id LIMIT ?`, []any{parts.Mask(), limit}, scanTimerRow)
	return out, fail("read outbox", err)
}

// OutboxDone implements hourglass.Outbox: it deletes the timers, 1000 ids
// per statement. Idempotent.
func (s *Store) OutboxDone(ctx context.Context, published []hourglass.DueItem) error {
	for len(published) > 0 {
		chunk := published[:min(len(published), 1000)]
		published = published[len(chunk):]
		args := make([]any, 0, 2*len(chunk))
		for _, t := range chunk {
			args = append(args, t.ID, hourglass.UnixMilli(t.At))
		}
		if err := s.retryStatement(ctx, "outbox done", func() error {
			_, err := s.db.ExecContext(ctx, `DELETE FROM timer_outbox WHERE (order_id, deadline) IN (`+rowsOf(len(chunk), `(?, ?)`)+`)`, args...)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
