package hourglass

import "time"

// Limits on orders, enforced by ValidateItems and the store.
const (
	MaxItemsPerOrder = 100
	MinQuantity      = 1
	MaxQuantity      = 10000
	MaxUserIDLength  = 128
)

// Item is one line of an order: a quantity of a SKU.
type Item struct {
	SKU      string
	Quantity int64
}

// Order is an order and its lifecycle timestamps. Zero times and empty
// strings mean "unset".
type Order struct {
	ID          int64
	UserID      string
	Status      State
	Items       []Item
	CreatedAt   time.Time
	Deadline    time.Time
	PaidAt      time.Time
	ClosedAt    time.Time // when the close (status + stock release) committed
	CloseReason string
	PaymentID   string
	// RemindBefore and RemindAt are the order's reminder lead and when its
	// order.expiring is due (zero: none, or already sent). The store's
	// write path keeps them (CreateOrder's and ExtendOrder's answers carry
	// them); reads (Order, ListOrders) leave them zero.
	RemindBefore time.Duration
	RemindAt     time.Time
}

// Payable reports whether o can be paid at now: it is pending and now is
// strictly before the deadline. The boundary is exact to the millisecond, the
// unit deadlines are stored in.
func (o Order) Payable(now time.Time) bool {
	return o.Status == StatePendingPayment && UnixMilli(now) < UnixMilli(o.Deadline)
}

// View returns o as a reader must see it at now: an unpaid order at or past
// its deadline reads as closed (reason timeout) even before the closer has
// committed; its ClosedAt stays zero until the close commits.
func (o Order) View(now time.Time) Order {
	if o.Status == StatePendingPayment && !o.Payable(now) {
		o.Status = StateClosed
		o.CloseReason = CloseReasonTimeout
	}
	return o
}

// ValidateItems checks the items of a new order: 1..MaxItemsPerOrder lines,
// valid SKUs, quantities in MinQuantity..MaxQuantity, no SKU twice.
func ValidateItems(items []Item) error {
	if len(items) == 0 {
		return Errorf(CodeInvalidArgument, "items: at least one item is required")
	}
	if len(items) > MaxItemsPerOrder {
		return Errorf(CodeInvalidArgument, "items: at most %d items allowed, got %d", MaxItemsPerOrder, len(items))
	}
	seen := make(map[string]struct{}, len(items))
	for i, it := range items {
		if err := ValidateSKU(it.SKU); err != nil {
			return Errorf(CodeInvalidArgument, "items[%d].%s", i, ErrorMessage(err))
		}
		if it.Quantity < MinQuantity || it.Quantity > MaxQuantity {
			return Errorf(CodeInvalidArgument, "items[%d].quantity: must be between %d and %d, got %d", i, MinQuantity, MaxQuantity, it.Quantity)
		}
		if _, dup := seen[it.SKU]; dup {
			return Errorf(CodeInvalidArgument, "items[%d].sku: %q appears more than once; merge the quantities", i, it.SKU)
		}
		seen[it.SKU] = struct{}{}
	}
	return nil
}

// ValidateUserID checks a user id: 1..MaxUserIDLength bytes of text
// (CheckText).
func ValidateUserID(id string) error {
	if id == "" {
		return Errorf(CodeInvalidArgument, "user_id: required")
	}
	if len(id) > MaxUserIDLength {
		return Errorf(CodeInvalidArgument, "user_id: at most %d bytes, got %d", MaxUserIDLength, len(id))
	}
	return CheckText("user_id", id)
}

// ValidatePaymentID checks a payment id: 1..128 bytes of text (CheckText).
func ValidatePaymentID(id string) error {
	if id == "" {
		return Errorf(CodeInvalidArgument, "payment_id: required")
	}
	if len(id) > 128 {
		return Errorf(CodeInvalidArgument, "payment_id: at most 128 bytes, got %d", len(id))
	}
	return CheckText("payment_id", id)
}

// DueItem is one thing that falls due: an id and the time it is due. It is
// what the engine schedules and every delay mechanism carries: a pending
// order at its deadline, a client's timer (ID at or above TimerIDBase) at
// its fire time, or a shop's row (ID from SourceIDBase) at its deadline.
type DueItem struct {
	ID int64
	At time.Time
}

// ClosedOrder reports one close committed by Store.CloseOrders.
type ClosedOrder struct {
	OrderID  int64
	Deadline time.Time
	ClosedAt time.Time
}

// CreateOrderParams is the input of Store.CreateOrder.
type CreateOrderParams struct {
	UserID string
	Items  []Item
	// Timeout, when non-zero, overrides the policy; it must be within
	// MinTimeout..MaxTimeout.
	Timeout time.Duration
	// RemindBefore, when non-zero, overrides the policy's reminder lead
	// (Policy.RemindLead): MinTimeout..MaxTimeout, or NoReminder.
	RemindBefore time.Duration
	// IdempotencyKey, when set, makes the create idempotent: the same key
	// with the same RequestHash returns the first order; another hash fails
	// with ErrIdempotencyKeyReused.
	IdempotencyKey string
	RequestHash    []byte
}

// OrderFilter selects orders for Store.ListOrders, in the order Sort
// names: by id, or by deadline or creation time and then id when a range of
// that time is set. Each time range is half-open, [From, Before): a zero
// bound is no bound, so consecutive windows neither overlap nor leave a gap.
// Every combination is read from an index on every store.
type OrderFilter struct {
	Status State  // "" for any; filtering uses the View at Now
	UserID string // "" for any
	// DeadlineFrom and DeadlineBefore bound the deadline (From inclusive,
	// Before exclusive); either set orders the list by deadline.
	DeadlineFrom, DeadlineBefore time.Time
	// CreatedFrom and CreatedBefore bound the creation time likewise;
	// either set (and no deadline bound) orders the list by creation time.
	CreatedFrom, CreatedBefore time.Time
	// After is the cursor: only orders after the one with id After, in the
	// list's order. Ordered by a time, AfterAt is that order's time (its
	// deadline or creation time as the previous page returned it); the
	// cursor is unset when After is 0.
	After   int64
	AfterAt time.Time
	Limit   int
	Now     time.Time
}

// OrderSort is the order of a list of orders.
type OrderSort int

const (
	// OrderByID lists by ascending id: no time range is set.
	OrderByID OrderSort = iota
	// OrderByDeadline lists by (deadline, id): a deadline bound is set.
	OrderByDeadline
	// OrderByCreated lists by (created_at, id): a creation bound is set and
	// no deadline bound.
	OrderByCreated
)

// String is the sort's name, as cursors and messages name it.
func (s OrderSort) String() string {
	switch s {
	case OrderByDeadline:
		return "deadline"
	case OrderByCreated:
		return "created"
	}
	return "id"
}

// Sort is the order the filter lists in.
func (f OrderFilter) Sort() OrderSort {
	switch {
	case !f.DeadlineFrom.IsZero() || !f.DeadlineBefore.IsZero():
		return OrderByDeadline
	case !f.CreatedFrom.IsZero() || !f.CreatedBefore.IsZero():
		return OrderByCreated
	}
	return OrderByID
}

// SortKey is o's time in the sort s (zero for OrderByID): the AfterAt of a
// cursor at o.
func (s OrderSort) SortKey(o Order) time.Time {
	switch s {
	case OrderByDeadline:
		return o.Deadline
	case OrderByCreated:
		return o.CreatedAt
	}
	return time.Time{}
}
