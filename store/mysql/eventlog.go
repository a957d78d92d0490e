package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

var _ hourglass.EventLog = (*Store)(nil)

// sinkHoldSQL is the condition PruneEvents adds for an event of its
// single-table DELETE on events (sqlq.SinkHold), its one parameter the
// prune's before.
var sinkHoldSQL = sqlq.SinkHold("events", "?")

// Events implements hourglass.EventLog: one range of the primary key, then
// the orders of the page's order events in one query (rendered as of each
// event); a timer's or a source's event carries its body.
func (s *Store) Events(ctx context.Context, p hourglass.EventPage) ([]hourglass.EventRecord, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("mysql: events: limit must be positive, got %d", p.Limit)
	}
	until := p.Until
	if until <= 0 {
		until = 1<<63 - 1
	}
	rows, err := s.db.QueryContext(ctx, `SELECT seq, id, type, order_id, created_at, body FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?`, p.After, until, p.Limit)
	if err != nil {
		return nil, fail("events", err)
	}
	defer rows.Close()
	var (
		out  []hourglass.EventRecord
		want []any // ids of the orders to render from
		seen = map[int64]bool{}
	)
	for rows.Next() {
		var (
			e       hourglass.EventRecord
			typ     string
			created int64
		)
		if err := rows.Scan(&e.Seq, &e.ID, &typ, &e.OrderID, &created, &e.Body); err != nil {
			return nil, fail("events", err)
		}
		e.Type, e.CreatedAt = hourglass.EventType(typ), hourglass.FromUnixMilli(created)
		if e.Body == nil && !seen[e.OrderID] {
			seen[e.OrderID] = true
			want = append(want, e.OrderID)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("events", err)
	}
	rows.Close()
	if len(want) == 0 {
		return out, nil
	}
	orders := make(map[int64]hourglass.Order, len(want))
	orows, err := s.db.QueryContext(ctx, `SELECT `+orderColumns+` FROM orders WHERE id IN (?`+strings.Repeat(",?", len(want)-1)+`)`, want...)
	if err != nil {
		return nil, fail("events' orders", err)
	}
	defer orows.Close()
	for orows.Next() {
		o, err := scanOrder(orows)
		if err != nil {
			return nil, fail("events' orders", err)
		}
		orders[o.ID] = o
	}
	if err := orows.Err(); err != nil {
		return nil, fail("events' orders", err)
	}
	for i, e := range out {
		if e.Body != nil {
			continue
		}
		o, ok := orders[e.OrderID]
		if !ok { // cannot happen: orders are never deleted
			return nil, fmt.Errorf("mysql: events: order %d of event %s not found", e.OrderID, e.ID)
		}
		out[i].Body = renderEvent(e.ID, e.Type, hourglass.UnixMilli(e.CreatedAt), o)
	}
	return out, nil
}
