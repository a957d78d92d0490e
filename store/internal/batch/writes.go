package batch

import (
	"context"
	"slices"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// Writes are a store's group-committed writes (hourglass.Store's order
// writes, hourglass.TimerStore's, hourglass.DeliveryStore.RecordAttempt):
// each checks its input, queues one Op and answers from its Result, so
// every store that embeds Writes validates, refuses and answers alike. The
// guarantees are Run's: the decision and the write are one step on the
// rows the batch read (and, on a server store, locked), so concurrent
// calls, in this process or others, never oversell or pay a closed order.
// Safe for concurrent use.
type Writes struct {
	// Queue queues o in its lane and waits for its result, o.Res; its error
	// is the queue's or o.Res.Err. The answer stays in o (no Result copied
	// through the call), so a create's goroutine keeps a small stack.
	Queue func(ctx context.Context, o *Op) error
	// ReadOrder reads an order: an idempotent replay's answer.
	ReadOrder func(ctx context.Context, id int64) (hourglass.Order, error)
	// MaxKeyBytes, when positive, bounds an idempotency key's and a request
	// hash's bytes (their columns' size).
	MaxKeyBytes int
}

// CreateOrder implements hourglass.Store: idempotent when p.IdempotencyKey
// is set, also when two processes race the same key. The policy is read
// in the batch's transaction.
func (w *Writes) CreateOrder(ctx context.Context, p hourglass.CreateOrderParams) (hourglass.Order, bool, error) {
	if err := plan.ValidateCreate(p); err != nil {
		return hourglass.Order{}, false, err
	}
	if n := w.MaxKeyBytes; n > 0 && (len(p.IdempotencyKey) > n || len(p.RequestHash) > n) {
		return hourglass.Order{}, false, hourglass.Errorf(hourglass.CodeInvalidArgument, "idempotency key and request hash: at most %d bytes each", n)
	}
	// Filled in place rather than from a literal, which the compiler builds
	// on the stack (an Op is large) before copying it to the heap.
	o := new(Op)
	o.Kind = Create
	o.Create = p
	o.Items = stored.EncodeItems(p.Items)
	// The id reads crypto/rand: in the caller's goroutine, not the writer's
	// (a replay's or a refused create's id goes unused).
	o.EventID = hourglass.NewEventID()
	r := w.queue(ctx, o)
	if r.Err != nil {
		return hourglass.Order{}, false, r.Err
	}
	if r.Replay != 0 {
		err := w.replay(ctx, o)
		return r.Order, false, err
	}
	return r.Order, r.Created, nil
}

// replay reads the order an idempotent replay answers with into o.Res:
// ReadOrder's Order result then takes room in this frame, not in every
// create's.
//
//go:noinline
func (w *Writes) replay(ctx context.Context, o *Op) error {
	var err error
	o.Res.Order, err = w.ReadOrder(ctx, o.Res.Replay)
	return err
}

// PayOrder implements hourglass.Store: only a pending order strictly
// before its deadline, read at the batch's now, becomes paid (plan.Pay);
// the close is the mirror image, so a pay and a close racing at the
// deadline end with exactly one of them. Idempotent for the same payment
// id.
func (w *Writes) PayOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	return w.pay(ctx, id, paymentID, false)
}

// PayDueOrder implements hourglass.Store: PayOrder without the deadline
// check (the payment check before the close answered paid).
func (w *Writes) PayDueOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	return w.pay(ctx, id, paymentID, true)
}

func (w *Writes) pay(ctx context.Context, id int64, paymentID string, late bool) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	o := new(Op)
	o.Kind, o.ID, o.PaymentID, o.Late = Pay, id, paymentID, late
	r := w.queue(ctx, o)
	return r.Order, r.Err
}

// ExtendOrder implements hourglass.Store (plan.Extend decides): the
// order.extended event keeps its body, and the new deadline goes to the
// outbox, the other processes' feed and the due feed.
func (w *Writes) ExtendOrder(ctx context.Context, p hourglass.ExtendOrderParams) (hourglass.Order, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Order{}, err
	}
	o := new(Op)
	o.Kind, o.ID, o.Extend = Extend, p.ID, p
	r := w.queue(ctx, o)
	return r.Order, r.Err
}

// TransitionOrder implements hourglass.Store (plan.Transition decides).
func (w *Writes) TransitionOrder(ctx context.Context, id int64, a hourglass.Action) (hourglass.Order, error) {
	if _, _, err := plan.Action(a); err != nil {
		return hourglass.Order{}, err
	}
	r := w.queue(ctx, &Op{Kind: Transition, ID: id, Action: a})
	return r.Order, r.Err
}

// CloseOrders implements hourglass.Store. The provenance ctx carries
// (hourglass.WithCloser) is recorded with each order.closed. Closes jump
// the queue of API writes; a batch releases each product's stock with one statement however
// many of its orders close.
func (w *Writes) CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	r := w.queue(ctx, &Op{Kind: Close, IDs: ids, By: hourglass.CloserFrom(ctx)})
	return r.Closed, r.Err
}

// ArmTimer implements hourglass.TimerStore: the key's row is read (locked)
// in the batch, then inserted or re-armed; a repeat of the arming that
// scheduled it writes nothing. Exactly one of several arms of a new key
// racing from several processes creates it (see timers.go). Errors:
// invalid_argument (p.Validate, a WebhookID naming no webhook, a
// RequestHash over MaxKeyBytes), unavailable.
func (w *Writes) ArmTimer(ctx context.Context, p hourglass.ArmTimerParams) (hourglass.Timer, bool, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Timer{}, false, err
	}
	if n := w.MaxKeyBytes; n > 0 && len(p.RequestHash) > n {
		return hourglass.Timer{}, false, hourglass.Errorf(hourglass.CodeInvalidArgument, "request hash: at most %d bytes, got %d", n, len(p.RequestHash))
	}
	o := new(Op)
	o.Kind, o.Arm = Arm, p
	r := w.queue(ctx, o)
	if r.Err != nil {
		return hourglass.Timer{}, false, r.Err
	}
	return r.Timer, r.Created, nil
}

// CancelTimer implements hourglass.TimerStore: a scheduled timer becomes
// cancelled; a cancelled one is returned as it is (idempotent). Errors:
// not_found, timer_fired, unavailable.
func (w *Writes) CancelTimer(ctx context.Context, key string) (hourglass.Timer, error) {
	r := w.queue(ctx, &Op{Kind: Cancel, Key: key})
	if r.Err != nil {
		return hourglass.Timer{}, r.Err
	}
	return r.Timer, nil
}

// FireTimers implements hourglass.TimerStore. Like CloseOrders it jumps the
// queue of API writes: the listed timers still scheduled and due are fired,
// each with its timer.fired event (with its body) and its deliveries: to
// its own webhook if that still exists, else to the webhooks subscribed.
// Ids that are not timers' are ignored. Errors: unavailable.
func (w *Writes) FireTimers(ctx context.Context, ids []int64) ([]hourglass.FiredTimer, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return !hourglass.IsTimerID(id) })
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	r := w.queue(ctx, &Op{Kind: Fire, IDs: slices.Compact(ids), By: hourglass.CloserFrom(ctx)})
	return r.Fired, r.Err
}

// RecordAttempt implements hourglass.DeliveryStore: a compare-and-set on
// (state pending, attempts); not Recorded when another attempt was
// recorded first or the delivery is gone. Attempts come in the low lane,
// so a delivery backlog's bookkeeping shares transactions and takes only
// the room closes and API writes leave.
func (w *Writes) RecordAttempt(ctx context.Context, r hourglass.AttemptResult) (hourglass.AttemptRecord, error) {
	o := new(Op)
	o.Kind, o.Attempt = Attempt, r
	res := w.queue(ctx, o)
	return res.Record, res.Err
}

// queue queues o and returns its answer, o.Res, with the queue's error
// (the context's, a closed writer's) when o never ran. A pointer: Result
// holds a whole Order, which a return by value copies through each frame.
func (w *Writes) queue(ctx context.Context, o *Op) *Result {
	if err := w.Queue(ctx, o); err != nil && o.Res.Err == nil {
		o.Res = Result{Err: err}
	}
	return &o.Res
}
