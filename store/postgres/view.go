package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/jackc/pgx/v5"
)

var _ hourglass.OrderViewer = (*Store)(nil)

// viewOrderSQL reads an order and the now its pays are decided by (the
// writer's COALESCE($now, dbNow)) in one statement.
const viewOrderSQL = `SELECT ` + orderColumns + `, COALESCE($2::bigint, ` + dbNow + `) FROM orders o WHERE o.id = $1`

// ViewOrder implements hourglass.OrderViewer: the order as Order.View
// shows it at the database's now, read with the row. Errors: not_found,
// unavailable.
func (s *Store) ViewOrder(ctx context.Context, id int64) (hourglass.Order, error) {
	var nowMs int64
	o, err := scanOrder(s.pool.QueryRow(ctx, viewOrderSQL, id, s.nowArg()), &nowMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, plan.OrderNotFound(id)
	}
	if err != nil {
		return o, s.fail("view order", err)
	}
	return o.View(hourglass.FromUnixMilli(nowMs)), nil
}

// Now implements hourglass.OrderViewer: the database's now (or the test
// clock), as the writer reads it. Errors: unavailable.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var ms int64
	if err := s.pool.QueryRow(ctx, nowSQL, s.nowArg()).Scan(&ms); err != nil {
		return time.Time{}, s.fail("read now", err)
	}
	return hourglass.FromUnixMilli(ms), nil
}
