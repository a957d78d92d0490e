// Package plan makes every admission and transition decision of the stores
// on rows a batch has locked, in pure Go: which creates the stock admits
// (idempotent replays, repeats within the batch, unknown SKUs, stock, the
// policy's timeout), and whether a payment, a cancel, a ship, a complete or
// a close may happen to an order and, if not, the refusal the caller gets;
// and what each of a batch of timer requests becomes (requests.go). A
// dialect reads and locks the rows, asks the planner, and writes what it
// decided; so every store refuses with the same code and message, and the
// decisions are table-tested and fuzzed without a database. It imports the
// root package and the standard library only.
package plan

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
)

// ValidateCreate checks a create's params before it is queued. Errors:
// invalid_argument.
func ValidateCreate(p hourglass.CreateOrderParams) error {
	if err := hourglass.ValidateUserID(p.UserID); err != nil {
		return err
	}
	if err := hourglass.ValidateItems(p.Items); err != nil {
		return err
	}
	if p.Timeout != 0 {
		if err := hourglass.ValidateTimeout("timeout_ms", p.Timeout); err != nil {
			return err
		}
	}
	if p.RemindBefore != hourglass.NoReminder {
		return hourglass.ValidateRemindBefore("remind_before_ms", p.RemindBefore)
	}
	return nil
}

// Action returns the transition of action a, or, for an action that is not
// one, an invalid_argument error (on every store).
func Action(a hourglass.Action) (from, to hourglass.State, err error) {
	from, to, err = a.Transition()
	if err != nil {
		return "", "", hourglass.Errorf(hourglass.CodeInvalidArgument, "%s", err.Error())
	}
	return from, to, nil
}

// Product is a product row a batch locked, with the batch's moves applied.
type Product struct {
	Category                  string
	Available, Reserved, Sold int64
	// Delta is the batch's net change of Available, Reserved and Sold: a
	// dialect writes each changed row once, however many orders moved it.
	Delta [3]int64
}

// Changed reports whether the batch moved any of p's stock.
func (p *Product) Changed() bool { return p.Delta != [3]int64{} }

// Bucket names one of a product's stock counts.
type Bucket int

const (
	Available Bucket = iota
	Reserved
	Sold
)

func (p *Product) count(b Bucket) *int64 {
	switch b {
	case Reserved:
		return &p.Reserved
	case Sold:
		return &p.Sold
	}
	return &p.Available
}

// Stock is the products a batch locked, by SKU.
type Stock map[string]*Product

// Move moves items' quantities from one bucket to another. It fails,
// moving nothing, when a SKU was not locked (a pending order's product
// cannot be missing: products with orders are not deleted).
func (s Stock) Move(items []hourglass.Item, from, to Bucket) error {
	for _, it := range items {
		if s[it.SKU] == nil {
			return fmt.Errorf("product %q of a pending order is missing", it.SKU)
		}
	}
	for _, it := range items {
		p := s[it.SKU]
		*p.count(from) -= it.Quantity
		*p.count(to) += it.Quantity
		p.Delta[from] -= it.Quantity
		p.Delta[to] += it.Quantity
	}
	return nil
}

// Changed returns the SKUs whose stock the batch changed, sorted.
func (s Stock) Changed() []string {
	var out []string
	for sku, p := range s {
		if p.Changed() {
			out = append(out, sku)
		}
	}
	slices.Sort(out)
	return out
}

// StoredKey is an idempotency key a batch found stored.
type StoredKey struct {
	Hash    []byte
	OrderID int64
	// Order is the key's order when the dialect read it with the key (else
	// the caller reads OrderID).
	Order *hourglass.Order
}

// Admission decides a batch's creates in queue order on its locked rows.
// Make one per batch attempt; it is not safe for concurrent use.
type Admission struct {
	// Now is the batch's now, read after its locks were taken.
	Now time.Time
	// Stock holds the locked products of every SKU the creates name; an
	// admitted create moves its items from Available to Reserved in it.
	Stock Stock
	// Keys are the idempotency keys the creates carry that are stored.
	Keys map[string]StoredKey
	// Policy returns the timeout policy, read in the batch's transaction;
	// it is called at most once, by the first create without a timeout.
	Policy func() (hourglass.Policy, error)

	policy   *hourglass.Policy
	admitted []hourglass.CreateOrderParams
	inBatch  map[string]int // idempotency key → index into admitted
}

// Decision is what Admission decided for one create: exactly one of Err
// (a refusal), Replay (a repeat of a stored create: the answer is its
// order), SameAs >= 0 (a repeat of the SameAs-th create the batch
// admitted) or Order (admitted: a new pending order, its ID left to the
// dialect).
type Decision struct {
	Err    error
	Replay *StoredKey
	SameAs int
	Order  *hourglass.Order
}

// Create decides one create. The error is not a refusal but the batch's
// failure (the policy could not be read).
func (a *Admission) Create(p hourglass.CreateOrderParams) (Decision, error) {
	d := Decision{SameAs: -1}
	if key := p.IdempotencyKey; key != "" {
		if j, ok := a.inBatch[key]; ok {
			if !bytes.Equal(a.admitted[j].RequestHash, p.RequestHash) {
				d.Err = hourglass.ErrIdempotencyKeyReused
			} else {
				d.SameAs = j
			}
			return d, nil
		}
		if k, ok := a.Keys[key]; ok {
			if !bytes.Equal(k.Hash, p.RequestHash) {
				d.Err = hourglass.ErrIdempotencyKeyReused
			} else {
				d.Replay = &k
			}
			return d, nil
		}
	}
	categories := make([]string, 0, len(p.Items))
	for i, it := range p.Items {
		prod := a.Stock[it.SKU]
		if prod == nil {
			d.Err = hourglass.Errorf(hourglass.CodeNotFound, "items[%d].sku: product %q not found", i, it.SKU)
			return d, nil
		}
		if prod.Available < it.Quantity {
			d.Err = hourglass.Errorf(hourglass.CodeInsufficientStock, "items[%d]: %d of %q requested, %d available", i, it.Quantity, it.SKU, prod.Available)
			return d, nil
		}
		categories = append(categories, prod.Category)
	}
	timeout, lead := p.Timeout, p.RemindBefore
	if timeout == 0 || lead == 0 {
		if a.policy == nil {
			policy, err := a.Policy()
			if err != nil {
				return d, err
			}
			a.policy = &policy
		}
		if timeout == 0 {
			timeout = a.policy.Timeout(categories)
		}
		if lead == 0 {
			lead = a.policy.RemindLead(categories)
		}
	}
	lead = max(lead, 0) // NoReminder
	if err := a.Stock.Move(p.Items, Available, Reserved); err != nil {
		return d, err
	}
	if p.IdempotencyKey != "" {
		if a.inBatch == nil {
			a.inBatch = make(map[string]int)
		}
		a.inBatch[p.IdempotencyKey] = len(a.admitted)
	}
	a.admitted = append(a.admitted, p)
	d.Order = &hourglass.Order{
		UserID:    p.UserID,
		Status:    hourglass.StatePendingPayment,
		Items:     slices.Clone(p.Items),
		CreatedAt: a.Now,
		Deadline:  a.Now.Add(timeout.Truncate(time.Millisecond)),
	}
	d.Order.RemindBefore = lead.Truncate(time.Millisecond)
	d.Order.RemindAt = hourglass.RemindAt(d.Order.CreatedAt, d.Order.Deadline, d.Order.RemindBefore)
	return d, nil
}

// Pay decides a payment of order id with paymentID at now on its locked row
// cur (nil: there is none). pay is true when it becomes paid: only a
// pending order strictly before its deadline (the close is the mirror
// image, deadline <= now; the row lock orders them). Otherwise repeat is
// true for a repeat of the payment that succeeded (the answer is cur), or
// err is the refusal: not_found, order_not_payable.
func Pay(cur *hourglass.Order, id int64, paymentID string, now time.Time) (pay, repeat bool, err error) {
	if cur == nil {
		return false, false, OrderNotFound(id)
	}
	if cur.Payable(now) {
		return true, false, nil
	}
	if cur.PaymentID == paymentID && cur.Status != hourglass.StatePendingPayment && !cur.PaidAt.IsZero() {
		return false, true, nil
	}
	return false, false, hourglass.Errorf(hourglass.CodeOrderNotPayable, "order %d is %s", id, describe(*cur, now))
}

// Transition decides action a (from → to, as Action returns them) on
// order id's locked row cur (nil: there is none) at now: nil when it may
// happen, else the refusal: not_found, invalid_transition. A cancel, like a
// payment, is refused at or after the deadline: by then the order belongs
// to the closer.
func Transition(cur *hourglass.Order, id int64, a hourglass.Action, from hourglass.State, now time.Time) error {
	if cur == nil {
		return OrderNotFound(id)
	}
	if cur.Status != from || (from == hourglass.StatePendingPayment && !cur.Payable(now)) {
		return hourglass.Errorf(hourglass.CodeInvalidTransition, "cannot %s order %d: it is %s", a, id, cur.View(now).Status)
	}
	return nil
}

// Closes reports whether the closer closes the locked order cur (nil: none)
// at now: only a pending order at or past its deadline. A paid, cancelled,
// already closed, unknown or not yet due order is left alone.
func Closes(cur *hourglass.Order, now time.Time) bool {
	return cur != nil && cur.Status == hourglass.StatePendingPayment && !cur.Payable(now)
}

// describe says why an order cannot be paid.
func describe(o hourglass.Order, now time.Time) string {
	v := o.View(now)
	if v.Status == hourglass.StateClosed && o.Status == hourglass.StatePendingPayment {
		return "past its deadline " + v.Deadline.Format(time.RFC3339Nano)
	}
	if v.Status == hourglass.StatePaid || v.Status == hourglass.StateShipped || v.Status == hourglass.StateCompleted {
		return string(v.Status) + " with another payment_id"
	}
	return string(v.Status)
}

// PayDue decides the close path's payment of order id (the payment check
// answered paid) on its locked row cur (nil: none), whatever its deadline:
// pay is true for a pending order; repeat for a repeat of the payment that
// succeeded (the answer is cur); else err: not_found, order_not_payable.
func PayDue(cur *hourglass.Order, id int64, paymentID string) (pay, repeat bool, err error) {
	if cur == nil {
		return false, false, OrderNotFound(id)
	}
	if cur.Status == hourglass.StatePendingPayment {
		return true, false, nil
	}
	if cur.PaymentID == paymentID && !cur.PaidAt.IsZero() {
		return false, true, nil
	}
	return false, false, hourglass.Errorf(hourglass.CodeOrderNotPayable, "order %d is %s", id, cur.Status)
}

// Extend decides extension p on order p.ID's locked row cur (nil: none)
// at now: extend is true when the deadline moves to target; repeat when
// the order already has the target deadline and could be extended (the
// answer is cur, unchanged); otherwise err is the refusal: not_found,
// invalid_transition (not pending, or, without p.Overdue, at or past its
// deadline), invalid_argument (the target is not later than the deadline,
// more than MaxOrderLifetime after creation, or not later than now).
func Extend(cur *hourglass.Order, p hourglass.ExtendOrderParams, now time.Time) (extend, repeat bool, target time.Time, err error) {
	if cur == nil {
		return false, false, time.Time{}, OrderNotFound(p.ID)
	}
	if cur.Status != hourglass.StatePendingPayment || (!p.Overdue && !cur.Payable(now)) {
		// Not describe's words: a payment_id is a payment's business.
		why := string(cur.View(now).Status)
		if cur.Status == hourglass.StatePendingPayment {
			why = "past its deadline " + cur.Deadline.Format(time.RFC3339Nano)
		}
		return false, false, time.Time{}, hourglass.Errorf(hourglass.CodeInvalidTransition, "cannot extend order %d: it is %s; only a pending order can be extended, before its deadline", p.ID, why)
	}
	field := "deadline"
	if p.By != 0 {
		field = "extend_ms"
	}
	target = p.Target(cur.Deadline)
	if p.By == 0 && target.Equal(cur.Deadline) {
		return false, true, target, nil
	}
	if !target.After(cur.Deadline) {
		return false, false, time.Time{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: the new deadline %s is not later than the order's deadline %s",
			field, target.Format(hourglass.TimeFormat), cur.Deadline.UTC().Format(hourglass.TimeFormat))
	}
	if limit := cur.CreatedAt.Add(hourglass.MaxOrderLifetime); target.After(limit) {
		return false, false, time.Time{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: the new deadline %s is too far: at most 7 days after the order's created_at, %s",
			field, target.Format(hourglass.TimeFormat), limit.UTC().Format(hourglass.TimeFormat))
	}
	if hourglass.UnixMilli(target) <= hourglass.UnixMilli(now) {
		return false, false, time.Time{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: the new deadline %s is not in the future (now %s)",
			field, target.Format(hourglass.TimeFormat), now.UTC().Format(hourglass.TimeFormat))
	}
	return true, false, target, nil
}

// Rearm returns the reminder of pending order o after its deadline moved
// at now: its lead before the new deadline if that is still ahead of now,
// else none. An order extended before its reminder gets it at the new
// time; one extended after it gets one again for the new deadline.
func Rearm(o hourglass.Order, now time.Time) time.Time {
	at := hourglass.RemindAt(o.CreatedAt, o.Deadline, o.RemindBefore)
	if at.IsZero() || hourglass.UnixMilli(at) <= hourglass.UnixMilli(now) {
		return time.Time{}
	}
	return at
}

// Reminds decides the reminder of the locked order cur (nil: none) at
// now, once it is due (RemindAt set, at or before now): send when the
// order is pending and its deadline still ahead; otherwise skip (it was
// paid, cancelled or closed first, or its deadline passed too: it will
// never be sent). Neither for an order without a reminder (none, or sent
// or skipped already) or not yet due.
func Reminds(cur *hourglass.Order, now time.Time) (send, skip bool) {
	if cur == nil || cur.RemindAt.IsZero() || hourglass.UnixMilli(cur.RemindAt) > hourglass.UnixMilli(now) {
		return false, false
	}
	if cur.Payable(now) {
		return true, false
	}
	return false, true
}
