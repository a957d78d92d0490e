package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
	"zombiezen.com/go/sqlite"
)

const orderColumns = `id, user_id, status, items, created_at, deadline, paid_at, closed_at, close_reason, payment_id`

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
	o := hourglass.Order{
		ID:          st.ColumnInt64(0),
		UserID:      st.ColumnText(1),
		Status:      hourglass.State(st.ColumnText(2)),
		CreatedAt:   hourglass.FromUnixMilli(st.ColumnInt64(4)),
		Deadline:    hourglass.FromUnixMilli(st.ColumnInt64(5)),
		CloseReason: st.ColumnText(8),
		PaymentID:   st.ColumnText(9),
	}
	if !st.ColumnIsNull(6) {
		o.PaidAt = hourglass.FromUnixMilli(st.ColumnInt64(6))
	}
	if !st.ColumnIsNull(7) {
		o.ClosedAt = hourglass.FromUnixMilli(st.ColumnInt64(7))
	}
	raw := st.ColumnText(3)
	if items, ok := parseEncodedItems(raw); ok {
		o.Items = items
		return o, nil
	}
	items, err := stored.DecodeItems(raw)
	if err != nil {
		return o, fmt.Errorf("sqlite: order %d: %w", o.ID, err)
	}
	o.Items = items
	return o, nil
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

// parseEncodedItems parses exactly what stored.EncodeItems writes; ok is false for
// anything else (then stored.DecodeItems, which accepts any JSON, must be used).
func parseEncodedItems(raw string) (items []hourglass.Item, ok bool) {
	const skuKey, qtyKey = `{"sku":"`, `","quantity":`
	rest, ok := strings.CutPrefix(raw, "[")
	for ok && rest != "]" {
		var sku string
		if rest, ok = strings.CutPrefix(rest, skuKey); !ok {
			return nil, false
		}
		if sku, rest, ok = strings.Cut(rest, qtyKey); !ok || strings.ContainsAny(sku, `"\`) {
			return nil, false
		}
		end := strings.IndexAny(rest, ",}")
		if end <= 0 || rest[end] != '}' {
			return nil, false
		}
		qty, err := strconv.ParseInt(rest[:end], 10, 64)
		if err != nil {
			return nil, false
		}
		items = append(items, hourglass.Item{SKU: sku, Quantity: qty})
		rest = rest[end+1:]
		if next, more := strings.CutPrefix(rest, ","); more && next != "]" {
			rest = next
		} else if more || rest != "]" {
			return nil, false
		}
	}
	return items, ok
}
