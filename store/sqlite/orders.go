package sqlite

import (
	"fmt"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
	"zombiezen.com/go/sqlite"
)

const orderColumns = stored.OrderColumns

func getOrder(conn *sqlite.Conn, id int64) (hourglass.Order, error) {
	stmt := conn.Prep(`SELECT ` + orderColumns + ` FROM orders WHERE id = ?1`)
	stmt.BindInt64(1, id)
	var (
		o       hourglass.Order
		scanErr error
	)
	found, err := step(stmt, func(st *sqlite.Stmt) { o, scanErr = scanOrder(st) })
	if err != nil {
		return o, fmt.Errorf("sqlite: get order %d: %w", id, err)
	}
	if scanErr != nil {
		return o, scanErr
	}
	if !found {
		return o, plan.OrderNotFound(id)
	}
	return o, nil
}

func scanOrder(st *sqlite.Stmt) (hourglass.Order, error) {
	r := stored.OrderRow{ID: st.ColumnInt64(0), User: st.ColumnText(1), Status: st.ColumnText(2), Items: st.ColumnText(3),
		Created: st.ColumnInt64(4), Deadline: st.ColumnInt64(5), Reason: nullText(st, 8), PaymentID: nullText(st, 9)}
	if !st.ColumnIsNull(6) {
		r.Paid = new(st.ColumnInt64(6))
	}
	if !st.ColumnIsNull(7) {
		r.Closed = new(st.ColumnInt64(7))
	}
	o, err := r.Order()
	if err != nil {
		return o, fmt.Errorf("sqlite: %w", err)
	}
	return o, nil
}

// nullText is column i's text, nil when it is NULL.
func nullText(st *sqlite.Stmt, i int) *string {
	if st.ColumnIsNull(i) {
		return nil
	}
	return new(st.ColumnText(i))
}
