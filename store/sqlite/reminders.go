package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
	"zombiezen.com/go/sqlite"
)

// scanReminder sets o's reminder from ReminderColumns at column i.
func scanReminder(st *sqlite.Stmt, i int, o *hourglass.Order) {
	r := stored.ReminderRow{BeforeMs: st.ColumnInt64(i + 1)}
	if !st.ColumnIsNull(i) {
		r.At = new(st.ColumnInt64(i))
	}
	r.Apply(o)
}

// SetRemindAt writes the remind_at of ids with one statement (NOT
// INDEXED: by the primary key, as UpdateOrders).
func (t *txn) SetRemindAt(_ context.Context, at time.Time, ids []int64) error {
	stmt := t.conn.Prep(`UPDATE OR FAIL orders NOT INDEXED SET remind_at = ?2 WHERE id IN (SELECT value FROM json_each(?1))`)
	stmt.BindText(1, idList(ids))
	bindNullTime(stmt, 2, at)
	if _, err := step(stmt, nil); err != nil {
		return fmt.Errorf("sqlite: set the reminder of %d orders from %d: %w", len(ids), ids[0], err)
	}
	return nil
}
