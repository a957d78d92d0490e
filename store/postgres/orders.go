package postgres

import (
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// orderColumns are an order's columns, in scanOrder's order, of the orders
// table aliased o.
const orderColumns = `o.id, o.user_id, o.status, o.items, o.created_at, o.deadline, o.paid_at, o.closed_at, o.close_reason, o.payment_id`

// scanOrder scans orderColumns followed by extra destinations.
func scanOrder(row pgx.Row, extra ...any) (hourglass.Order, error) {
	var r orderRow
	if err := row.Scan(r.dest(extra...)...); err != nil {
		return hourglass.Order{}, err
	}
	o, _, err := r.order()
	return o, err
}

// orderRow receives orderColumns. Every field may be NULL, so that an outer
// join that found no order scans too: a timer's event has none.
type orderRow struct {
	id, created, deadline, paid, closed    pgtype.Int8
	user, status, items, reason, paymentID pgtype.Text
}

// dest returns the destinations of orderColumns followed by extra.
func (r *orderRow) dest(extra ...any) []any {
	return append([]any{&r.id, &r.user, &r.status, &r.items, &r.created, &r.deadline, &r.paid, &r.closed, &r.reason, &r.paymentID}, extra...)
}

// order returns the scanned order, or false when the columns were NULL.
func (r *orderRow) order() (hourglass.Order, bool, error) {
	if !r.id.Valid {
		return hourglass.Order{}, false, nil
	}
	row := stored.OrderRow{ID: r.id.Int64, User: r.user.String, Status: r.status.String, Items: r.items.String,
		Created: r.created.Int64, Deadline: r.deadline.Int64, Reason: &r.reason.String, PaymentID: &r.paymentID.String}
	if r.paid.Valid {
		row.Paid = &r.paid.Int64
	}
	if r.closed.Valid {
		row.Closed = &r.closed.Int64
	}
	o, err := row.Order()
	return o, true, err
}
