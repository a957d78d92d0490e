package hourglass

import "time"

// MaxOrderLifetime is how long after its creation an order's deadline may
// be at most, however often it is extended (POST /v1/orders/{id}/extend, or
// a payment check that answered extend).
const MaxOrderLifetime = 7 * 24 * time.Hour

// ExtendOrderParams is the input of Store.ExtendOrder: the order and its
// new deadline, given as a time (Deadline) or as an amount added to the
// deadline the order has when the write runs (By); exactly one is set.
type ExtendOrderParams struct {
	ID       int64
	Deadline time.Time
	By       time.Duration
	// Overdue allows the extension at or after the order's deadline while
	// it is still pending: the payment check before the close answered
	// extend. The API's extension leaves it false (an order whose deadline
	// passed belongs to the closer); then the new deadline must also be
	// later than now.
	Overdue bool
}

// Validate checks the form of p before it is queued: a positive id, exactly
// one of Deadline and By, By positive and at most MaxOrderLifetime. Errors
// are invalid_argument *Error values naming the API's fields (deadline,
// extend_ms).
func (p ExtendOrderParams) Validate() error {
	switch {
	case p.Deadline.IsZero() == (p.By == 0):
		return Errorf(CodeInvalidArgument, "deadline, extend_ms: give exactly one")
	case p.By < 0 || (p.By > 0 && p.By < time.Millisecond):
		return Errorf(CodeInvalidArgument, "extend_ms: must be at least 1, got %d", p.By.Milliseconds())
	case p.By > MaxOrderLifetime:
		return Errorf(CodeInvalidArgument, "extend_ms: at most %d (%s), got %d", MaxOrderLifetime.Milliseconds(), MaxOrderLifetime, p.By.Milliseconds())
	}
	return nil
}

// Target returns the deadline p asks for an order whose deadline is now
// current, in whole milliseconds (the unit deadlines are stored in).
func (p ExtendOrderParams) Target(current time.Time) time.Time {
	if p.By != 0 {
		return FromUnixMilli(UnixMilli(current) + p.By.Milliseconds())
	}
	return FromUnixMilli(UnixMilli(p.Deadline))
}
