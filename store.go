package hourglass

import (
	"context"
	"time"
)

// Store is the database of record. Every method is safe for concurrent use;
// every write commits durably before it returns.
//
// Time: writes read "now" inside the statement that needs it, from the
// database's clock (the database server's for PostgreSQL and MySQL, the
// process's for the embedded SQLite), so a deadline check and the update it
// guards are one atomic step whatever the queueing delay before it, and
// every process sharing a database agrees on the boundary. created_at,
// paid_at and closed_at are that "now". A store opened with a test clock
// uses the clock instead.
//
// Several processes: stores meant to be shared (PostgreSQL, MySQL) make no
// single-process assumption: everything one store value commits is seen by
// every other store value on the same database (a policy, a webhook, a
// delivery), and every check-then-write is one conditional statement or
// holds a row lock. A store that cannot be shared (SQLite) says so and
// refuses a second process.
//
// Errors are *Error values with the codes named below; CodeUnavailable when
// the database cannot be reached or a write could not be made durable (the
// connection was lost, the disk is full): retry later. Anything else is an
// internal error wrapped with the store and operation.
type Store interface {
	// PutProduct creates or updates a product's name, category and available
	// stock; reserved and sold are kept. Returns the product as stored.
	PutProduct(ctx context.Context, p Product) (Product, error)
	// Product returns a product, or ErrNotFound.
	Product(ctx context.Context, sku string) (Product, error)

	// CreateOrder reserves the stock of all items atomically and inserts a
	// pending order whose deadline is Now + timeout (see Policy). It returns
	// created=false with the earlier order when the idempotency key was seen
	// with the same request hash. Errors: ErrNotFound (unknown SKU, message
	// names it), ErrInsufficientStock, ErrIdempotencyKeyReused.
	CreateOrder(ctx context.Context, p CreateOrderParams) (o Order, created bool, err error)
	// Order returns an order as stored (callers apply Order.View), or ErrNotFound.
	Order(ctx context.Context, id int64) (Order, error)
	// ListOrders returns up to f.Limit orders that match f, after its
	// cursor, in f.Sort's order (see OrderFilter).
	ListOrders(ctx context.Context, f OrderFilter) ([]Order, error)
	// PayOrder moves a pending order whose deadline is after now to paid and
	// its reserved stock to sold. Paying a paid order again with the same
	// payment id returns it unchanged (idempotent). Errors: ErrNotFound,
	// ErrOrderNotPayable.
	PayOrder(ctx context.Context, id int64, paymentID string) (Order, error)
	// TransitionOrder applies a cancel, ship or complete as a compare-and-set
	// on the current state; a cancel releases the reserved stock and is
	// refused at or after the deadline. Errors: ErrNotFound, ErrInvalidTransition.
	TransitionOrder(ctx context.Context, id int64, a Action) (Order, error)
	// ExtendOrder moves a pending order's deadline later (p.Target of its
	// deadline), writes its order.extended event (whose body keeps the
	// deadline it set) and announces the new deadline on the store's due
	// feed. Allowed while the order is pending and before its deadline
	// (the database's now), or at any time while it is pending with
	// p.Overdue. The new deadline must be later than the old one, at most
	// MaxOrderLifetime after created_at and, without Overdue, later than
	// now. A repeat that finds the order already at the target deadline
	// returns it unchanged (idempotent). Errors: invalid_argument (the
	// target, the message naming deadline or extend_ms), not_found,
	// invalid_transition (not pending, or its deadline passed).
	ExtendOrder(ctx context.Context, p ExtendOrderParams) (Order, error)
	// PayDueOrder moves a pending order to paid and its reserved stock to
	// sold whatever its deadline: the close path's pay, when the payment
	// check before a close answered that the order was paid (its payment
	// succeeded, its callback is late). paid_at is the database's now.
	// Paying again with the same payment id returns the order unchanged
	// (idempotent). Errors: invalid_argument, not_found,
	// order_not_payable (not pending).
	PayDueOrder(ctx context.Context, id int64, paymentID string) (Order, error)

	// CloseOrders closes, in one transaction, each listed order that is still
	// pending with a deadline <= now, releasing its stock. It is idempotent:
	// an order that is no longer pending (or not yet due) is skipped and not
	// reported. Returns the orders it closed.
	CloseOrders(ctx context.Context, ids []int64) ([]ClosedOrder, error)
	// PendingDue returns up to p.Limit pending orders with deadline <=
	// p.Until, ordered by (deadline, id) and strictly after the cursor
	// (p.After, p.AfterID); pass the last returned timer as the next cursor
	// to page.
	PendingDue(ctx context.Context, p PendingDueParams) ([]DueItem, error)

	// Policy returns the timeout policy as stored now, whichever store value
	// or process put it.
	Policy(ctx context.Context) (Policy, error)
	// PutPolicy validates and replaces the timeout policy; it applies to
	// orders created after it committed, through any store value on the
	// same database.
	PutPolicy(ctx context.Context, p Policy) error
}

// PendingDueParams is the input of Store.PendingDue: a page of pending
// deadlines in (deadline, id) order.
type PendingDueParams struct {
	// After and AfterID are the cursor: only timers strictly after
	// (After, AfterID) in (deadline, id) order. The zero value starts at the
	// beginning.
	After   time.Time
	AfterID int64
	// Until is the latest deadline returned.
	Until time.Time
	// Limit is the most timers returned; it must be positive.
	Limit int
	// Parts, when not nil, keeps only orders of these partitions (the
	// ones this node owns); see Parts.
	Parts Parts
}
