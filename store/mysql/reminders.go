package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// scanLockedOrder scans orderColumns followed by ReminderColumns: an
// order as the write path locks it.
func scanLockedOrder(sc scanner) (hourglass.Order, error) {
	var (
		r  stored.OrderRow
		rr stored.ReminderRow
	)
	if err := sc.Scan(append(r.Dest(), rr.Dest()...)...); err != nil {
		return hourglass.Order{}, err
	}
	o, err := r.Order()
	rr.Apply(&o)
	return o, err
}

// SetRemindAt writes the remind_at of ids with one statement.
func (t *txn) SetRemindAt(ctx context.Context, at time.Time, ids []int64) error {
	if _, err := t.tx.ExecContext(ctx, `UPDATE orders SET remind_at = ? WHERE id IN (`+placeholders(len(ids))+`)`,
		append([]any{stored.RemindAtArg(at)}, anys(ids)...)...); err != nil {
		return fmt.Errorf("set the reminder of %d orders: %w", len(ids), err)
	}
	return nil
}
