package hourglass

import (
	"context"
	"time"
)

// OrderViewer is an optional ability of a Store: reading an order as a
// reader must see it by the clock that decides its pay. A caller holding
// only a node's clock (corrected to err late against the database's, so
// that nothing closes early) would show a pending order as payable for a
// moment after a pay at that instant is refused; a store reads its own
// clock with the row instead.
type OrderViewer interface {
	// ViewOrder returns order id as Order.View shows it at the store's now:
	// the clock by which PayOrder and the closes decide (the database's,
	// or the store's test clock), read in the same statement as the row
	// where the store has one. A read at or after the deadline by that
	// clock shows an unpaid order closed (ClosedAt zero until the close
	// commits); one before it shows it pending, and a pay sent then is
	// accepted. Errors: ErrNotFound, unavailable. Safe for concurrent use;
	// it writes nothing.
	ViewOrder(ctx context.Context, id int64) (Order, error)
	// Now returns the store's now, the clock ViewOrder and PayOrder take,
	// for a list's OrderFilter.Now. Errors: unavailable. Safe for
	// concurrent use.
	Now(ctx context.Context) (time.Time, error)
}
