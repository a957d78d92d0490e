package postgres

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/writer"
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

// CreateOrder implements hourglass.Store. It is group-committed: the stock
// check and the reservation hold the products' row locks, so no concurrency
// (goroutines, store values, processes) can oversell. With an idempotency
// key it is idempotent across processes. Errors: invalid_argument,
// not_found, insufficient_stock, idempotency_key_reused, unavailable.
func (s *Store) CreateOrder(ctx context.Context, p hourglass.CreateOrderParams) (hourglass.Order, bool, error) {
	if err := plan.ValidateCreate(p); err != nil {
		return hourglass.Order{}, false, err
	}
	o := &op{kind: opCreate, create: p, items: stored.EncodeItems(p.Items)}
	if err := s.w.Submit(ctx, writer.Normal, o); err != nil {
		return hourglass.Order{}, false, err
	}
	return o.order, o.created, nil
}

// PayOrder implements hourglass.Store: a compare-and-set on status and
// deadline (deadline > the database's now, read after the row lock), group
// committed. Idempotent for the same payment id. Errors: invalid_argument,
// not_found, order_not_payable, unavailable.
func (s *Store) PayOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	o := &op{kind: opPay, id: id, paymentID: paymentID}
	if err := s.w.Submit(ctx, writer.Normal, o); err != nil {
		return hourglass.Order{}, err
	}
	return o.order, nil
}

// TransitionOrder implements hourglass.Store: a compare-and-set on the
// current state, group committed. Errors: not_found, invalid_transition,
// unavailable.
func (s *Store) TransitionOrder(ctx context.Context, id int64, a hourglass.Action) (hourglass.Order, error) {
	from, to, err := plan.Action(a)
	if err != nil {
		return hourglass.Order{}, err
	}
	o := &op{kind: opTransition, id: id, action: a, from: from, to: to}
	if err := s.w.Submit(ctx, writer.Normal, o); err != nil {
		return hourglass.Order{}, err
	}
	return o.order, nil
}

// CloseOrders implements hourglass.Store. Closes jump the queue of API
// writes; every close of the call is one statement in one transaction.
// Idempotent. Errors: unavailable.
func (s *Store) CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	o := &op{kind: opClose, ids: ids}
	if err := s.w.Submit(ctx, writer.Urgent, o); err != nil {
		return nil, err
	}
	return o.closed, nil
}

// PayDueOrder implements hourglass.Store: PayOrder's compare-and-set
// without the deadline (the payment check before the close answered paid),
// group committed. Idempotent for the same payment id. Errors:
// invalid_argument, not_found, order_not_payable, unavailable.
func (s *Store) PayDueOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	o := &op{kind: opPay, id: id, paymentID: paymentID, late: true}
	if err := s.w.Submit(ctx, writer.Normal, o); err != nil {
		return hourglass.Order{}, err
	}
	return o.order, nil
}

// ExtendOrder implements hourglass.Store: a compare-and-set on the locked
// row (extendSQL), group committed like PayOrder; the order.extended event
// keeps its body, the new deadline moves the outbox row (Config.Outbox) and
// is announced on the due feed and to the other processes. Errors:
// invalid_argument, not_found, invalid_transition, unavailable.
func (s *Store) ExtendOrder(ctx context.Context, p hourglass.ExtendOrderParams) (hourglass.Order, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Order{}, err
	}
	o := &op{kind: opExtend, id: p.ID, extend: p}
	if err := s.w.Submit(ctx, writer.Normal, o); err != nil {
		return hourglass.Order{}, err
	}
	return o.order, nil
}
