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
	// IdempotencyKey, when set, makes the create idempotent: the same key
	// with the same RequestHash returns the first order; another hash fails
	// with ErrIdempotencyKeyReused.
	IdempotencyKey string
	RequestHash    []byte
}

// OrderFilter selects orders for Store.ListOrders, in ascending id order.
type OrderFilter struct {
	Status State // "" for any; filtering uses the View at Now
	After  int64 // only ids greater than After
	Limit  int
	Now    time.Time
}
