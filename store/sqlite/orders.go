package sqlite

import (
	"context"
	"fmt"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
	"zombiezen.com/go/sqlite"
)

const orderColumns = stored.OrderColumns

// CreateOrder implements hourglass.Store. It is group-committed on the one
// writer (store/internal/batch): the stock check and the reservation run on
// the rows the writer reads in its transaction, so they cannot race; the
// policy is read in the write, so a policy put through another store value
// on this database governs the order. Idempotent when p.IdempotencyKey is
// set.
func (s *Store) CreateOrder(ctx context.Context, p hourglass.CreateOrderParams) (hourglass.Order, bool, error) {
	if err := plan.ValidateCreate(p); err != nil {
		return hourglass.Order{}, false, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Create, Create: p, Items: stored.EncodeItems(p.Items)})
	if r.Err != nil {
		return hourglass.Order{}, false, r.Err
	}
	if r.Replay != 0 {
		o, err := s.Order(ctx, r.Replay)
		return o, false, err
	}
	return r.Order, r.Created, nil
}

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

// PayOrder implements hourglass.Store: the planner decides on the order's
// row in the writer's transaction (plan.Pay: only a pending order strictly
// before its deadline; the close is the mirror image, and both run on the
// one writer).
func (s *Store) PayOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Pay, ID: id, PaymentID: paymentID})
	return r.Order, r.Err
}

// PayDueOrder implements hourglass.Store: PayOrder without the deadline
// check (the payment check before the close answered paid).
func (s *Store) PayDueOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Pay, ID: id, PaymentID: paymentID, Late: true})
	return r.Order, r.Err
}

// ExtendOrder implements hourglass.Store: the planner decides on the row
// the writer reads (plan.Extend); the new deadline moves the order's
// outbox timer too, and is announced on the due feed.
func (s *Store) ExtendOrder(ctx context.Context, p hourglass.ExtendOrderParams) (hourglass.Order, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Extend, ID: p.ID, Extend: p})
	return r.Order, r.Err
}

// TransitionOrder implements hourglass.Store.
func (s *Store) TransitionOrder(ctx context.Context, id int64, a hourglass.Action) (hourglass.Order, error) {
	if _, _, err := plan.Action(a); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Transition, ID: id, Action: a})
	return r.Order, r.Err
}

// CloseOrders implements hourglass.Store. Closes jump the queue of API
// writes; a batch releases each product's stock with one UPDATE however
// many of its orders close.
func (s *Store) CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Close, IDs: ids})
	return r.Closed, r.Err
}
