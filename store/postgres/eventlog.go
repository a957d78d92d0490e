package postgres

import (
	"context"
	"fmt"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/jackc/pgx/v5"
)

var _ hourglass.EventLog = (*Store)(nil)

// sinkHoldSQL is the condition PruneEvents adds for an event e (sqlq.SinkHold),
// $1 the prune's before.
var sinkHoldSQL = sqlq.SinkHold("e", "$1")

// Events implements hourglass.EventLog: one range of the primary key, each
// order event joined with its order (rendered as of the event), a timer's
// or a source's carrying its body.
func (s *Store) Events(ctx context.Context, p hourglass.EventPage) ([]hourglass.EventRecord, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("postgres: events: limit must be positive, got %d", p.Limit)
	}
	until := p.Until
	if until <= 0 {
		until = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, `SELECT `+orderColumns+`, e.seq, e.id, e.type, e.order_id, e.created_at, e.body
FROM events e LEFT JOIN orders o ON o.id = e.order_id AND e.body IS NULL
WHERE e.seq > $1 AND e.seq <= $2 ORDER BY e.seq LIMIT $3`, p.After, until, p.Limit)
	if err != nil {
		return nil, s.fail("events", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.EventRecord, error) {
		var (
			e    hourglass.EventRecord
			ord  orderRow
			typ  string
			at   int64
			body *string
		)
		if err := row.Scan(ord.dest(&e.Seq, &e.ID, &typ, &e.OrderID, &at, &body)...); err != nil {
			return e, err
		}
		e.Type, e.CreatedAt = hourglass.EventType(typ), hourglass.FromUnixMilli(at)
		if body != nil {
			e.Body = []byte(*body)
			return e, nil
		}
		o, found, err := ord.order()
		if err != nil {
			return e, err
		}
		if !found { // cannot happen: orders are never deleted
			return e, fmt.Errorf("order %d of event %s not found", e.OrderID, e.ID)
		}
		e.Body = renderEvent(e.ID, e.Type, at, o)
		return e, nil
	})
	if err != nil {
		return nil, s.fail("events", err)
	}
	return out, nil
}
