package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
)

var _ hourglass.Outbox = (*Store)(nil)

// OutboxBatch implements hourglass.Outbox.
func (s *Store) OutboxBatch(ctx context.Context, limit int, parts hourglass.Parts) ([]hourglass.DueItem, error) {
	var out []hourglass.DueItem
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		stmt := conn.Prep(`SELECT order_id, deadline FROM timer_outbox WHERE ((?2 >> (order_id % 64)) & 1) = 1 ORDER BY order_id LIMIT ?1`)
		defer stmt.Reset()
		stmt.BindInt64(1, int64(limit))
		stmt.BindInt64(2, parts.Mask())
		for {
			row, err := stmt.Step()
			if err != nil {
				return fmt.Errorf("sqlite: read outbox: %w", err)
			}
			if !row {
				return nil
			}
			out = append(out, hourglass.DueItem{ID: stmt.ColumnInt64(0), At: hourglass.FromUnixMilli(stmt.ColumnInt64(1))})
		}
	})
	return out, err
}

// OutboxDone implements hourglass.Outbox.
func (s *Store) OutboxDone(ctx context.Context, published []hourglass.DueItem) error {
	if len(published) == 0 {
		return nil
	}
	return s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
		stmt := conn.Prep(`DELETE FROM timer_outbox WHERE order_id = ?1 AND deadline = ?2`)
		for _, t := range published {
			stmt.BindInt64(1, t.ID)
			stmt.BindInt64(2, hourglass.UnixMilli(t.At))
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: outbox done: %w", err)
			}
		}
		return nil
	})
}
