package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/jackc/pgx/v5"
)

// scanLockedOrder scans orderColumns followed by remind_at and
// remind_before_ms: an order as the write path locks it.
func scanLockedOrder(row pgx.Row) (hourglass.Order, error) {
	var r stored.ReminderRow
	o, err := scanOrder(row, r.Dest()...)
	r.Apply(&o)
	return o, err
}

// SetRemindAt writes the remind_at of ids with one statement, sent with
// the batch's others.
func (t *txn) SetRemindAt(_ context.Context, at time.Time, ids []int64) error {
	t.queue(fmt.Sprintf("set the reminder of %d orders", len(ids)), `UPDATE orders SET remind_at = $2 WHERE id = ANY($1::bigint[])`, ids, nullMs(at))
	return nil
}
