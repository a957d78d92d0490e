package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

var _ hourglass.OrderViewer = (*Store)(nil)

// ViewOrder implements hourglass.OrderViewer: the order as Order.View
// shows it at the server's now (nowExpr, the clock the writers decide pays
// by), read in the same statement as the row. Errors: not_found,
// unavailable.
func (s *Store) ViewOrder(ctx context.Context, id int64) (hourglass.Order, error) {
	var nowMs int64
	row := s.db.QueryRowContext(ctx, `SELECT `+orderColumns+`, `+nowExpr+` FROM orders WHERE id = ?`, s.nowArg(), id)
	o, err := scanOrder(withNow{row, &nowMs})
	if errors.Is(err, sql.ErrNoRows) {
		return o, plan.OrderNotFound(id)
	}
	if err != nil {
		return o, fail(fmt.Sprintf("view order %d", id), err)
	}
	return o.View(hourglass.FromUnixMilli(nowMs)), nil
}

// Now implements hourglass.OrderViewer: the server's now (nowExpr), as the
// writers read it. Errors: unavailable.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	ms, err := s.now(ctx, s.db)
	if err != nil {
		return time.Time{}, fail("read now", err)
	}
	return hourglass.FromUnixMilli(ms), nil
}

// withNow scans orderColumns followed by one more column, now.
type withNow struct {
	sc  scanner
	now *int64
}

func (w withNow) Scan(dest ...any) error { return w.sc.Scan(append(dest, w.now)...) }
