package sqlite

import (
	"context"
	"fmt"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"zombiezen.com/go/sqlite"
)

var _ hourglass.EventLog = (*Store)(nil)

// sinkHoldSQL is the condition PruneEvents adds for an event e (sqlq.SinkHold),
// ?1 the prune's before.
var sinkHoldSQL = sqlq.SinkHold("e", "?1")

// Events implements hourglass.EventLog: one range of the primary key. An
// order event's body is rendered from the order's row (read once a page
// per order), a timer's is the one stored.
func (s *Store) Events(ctx context.Context, p hourglass.EventPage) ([]hourglass.EventRecord, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("sqlite: events: limit must be positive, got %d", p.Limit)
	}
	until := p.Until
	if until <= 0 {
		until = 1<<63 - 1
	}
	var out []hourglass.EventRecord
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		out = out[:0]
		orders := map[int64]hourglass.Order{}
		stmt := conn.Prep(`SELECT seq, id, type, order_id, created_at, body FROM events WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3`)
		defer stmt.Reset()
		stmt.BindInt64(1, p.After)
		stmt.BindInt64(2, until)
		stmt.BindInt64(3, int64(p.Limit))
		for {
			row, err := stmt.Step()
			if err != nil {
				return fmt.Errorf("sqlite: events after %d: %w", p.After, err)
			}
			if !row {
				return nil
			}
			e := hourglass.EventRecord{
				Seq:       stmt.ColumnInt64(0),
				ID:        stmt.ColumnText(1),
				Type:      hourglass.EventType(stmt.ColumnText(2)),
				OrderID:   stmt.ColumnInt64(3),
				CreatedAt: hourglass.FromUnixMilli(stmt.ColumnInt64(4)),
			}
			body, err := eventBody(columnBytes(stmt, 5), e.ID, e.Type, stmt.ColumnInt64(4), func() (hourglass.Order, error) {
				if o, ok := orders[e.OrderID]; ok {
					return o, nil
				}
				o, err := getOrder(conn, e.OrderID)
				if err == nil {
					orders[e.OrderID] = o
				}
				return o, err
			})
			if err != nil {
				return fmt.Errorf("sqlite: event %s: %w", e.ID, err)
			}
			e.Body = body
			out = append(out, e)
		}
	})
	return out, err
}
