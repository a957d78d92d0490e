package mysql

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
)

const orderColumns = stored.OrderColumns

// CreateOrder implements hourglass.Store. It is group-committed (store/internal/batch):
// the stock check and the reservation run on the batch's locked product
// rows, so concurrent creates, in this process or others, never oversell.
// The policy is read inside the batch's transaction. Idempotent when
// p.IdempotencyKey is set, also when two processes race the same key.
func (s *Store) CreateOrder(ctx context.Context, p hourglass.CreateOrderParams) (hourglass.Order, bool, error) {
	if err := plan.ValidateCreate(p); err != nil {
		return hourglass.Order{}, false, err
	}
	if len(p.IdempotencyKey) > 255 || len(p.RequestHash) > 255 {
		return hourglass.Order{}, false, hourglass.Errorf(hourglass.CodeInvalidArgument, "idempotency key and request hash: at most 255 bytes each")
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

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanOrder(sc scanner) (hourglass.Order, error) {
	var r stored.OrderRow
	if err := sc.Scan(r.Dest()...); err != nil {
		return hourglass.Order{}, err
	}
	return r.Order()
}

// PayOrder implements hourglass.Store. Group-committed: the deadline check
// (deadline > now, the server's now read with the order's row locked) and
// the update are one step under the row lock, so a pay and a close racing
// at the deadline, from any processes, end with exactly one of them.
func (s *Store) PayOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Pay, ID: id, PaymentID: paymentID})
	return r.Order, r.Err
}

// PayDueOrder implements hourglass.Store: PayOrder without the deadline
// check (the payment check before the close answered paid), decided on the
// locked row like a pay. Idempotent for the same payment id.
func (s *Store) PayDueOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Pay, ID: id, PaymentID: paymentID, Late: true})
	return r.Order, r.Err
}

// ExtendOrder implements hourglass.Store, group-committed like PayOrder:
// the planner decides on the locked row (plan.Extend) at the server's now;
// the order.extended event keeps its body, and the new deadline goes to
// the outbox (Config.Outbox), the order feed of the other processes and
// the due feed.
func (s *Store) ExtendOrder(ctx context.Context, p hourglass.ExtendOrderParams) (hourglass.Order, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Extend, ID: p.ID, Extend: p})
	return r.Order, r.Err
}

// TransitionOrder implements hourglass.Store; group-committed like PayOrder.
func (s *Store) TransitionOrder(ctx context.Context, id int64, a hourglass.Action) (hourglass.Order, error) {
	if _, _, err := plan.Action(a); err != nil {
		return hourglass.Order{}, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Transition, ID: id, Action: a})
	return r.Order, r.Err
}

// CloseOrders implements hourglass.Store. Closes jump the queue of API
// writes; the batch releases each SKU's stock with one UPDATE however many
// of its orders close.
func (s *Store) CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Close, IDs: ids})
	return r.Closed, r.Err
}
