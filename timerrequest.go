package hourglass

import (
	"context"
	"time"
)

// Timers armed in a shop's own transaction: the shop INSERTs a row into
// hourglass's timer_requests table (package txtimer writes one) in the
// transaction that creates its order, and hourglass applies each committed
// request as PUT (arm) or DELETE (cancel) /v1/timers/{key} would, then
// deletes it, in one transaction of its own. A request hourglass cannot
// apply moves to timer_request_errors with its reason.

// Timer request actions (the column action).
const (
	TimerRequestArm    = "arm"
	TimerRequestCancel = "cancel"
)

// TimerRequest is one row of timer_requests as the shop wrote it: every
// column but seq and requested_at may hold anything, NULL included.
type TimerRequest struct {
	Seq         int64
	Key         *string
	Action      string
	FireAt      *time.Time
	DelayMs     *int64
	Payload     *string
	WebhookID   *int64
	RequestedAt time.Time
}

// ArmParams returns the arm r asks for, as PUT /v1/timers/{key} would
// arm it (TimerArm.Params: the same checks and request hash), with an
// absolute FireAt: a delay counts from RequestedAt, or from now if
// RequestedAt lies after it. Errors: invalid_argument, naming the column.
func (r TimerRequest) ArmParams(now time.Time) (ArmTimerParams, error) {
	if r.Key == nil {
		return ArmTimerParams{}, Errorf(CodeInvalidArgument, "timer_key: required")
	}
	a := TimerArm{Key: *r.Key, FireAt: r.FireAt, DelayMs: r.DelayMs, WebhookID: r.WebhookID, RequestedAt: r.RequestedAt}
	if a.RequestedAt.IsZero() {
		a.RequestedAt = now
	}
	if r.Payload != nil {
		a.Payload = []byte(*r.Payload)
	}
	return a.Params(now)
}

// CancelKey returns the key a cancel request names. Errors:
// invalid_argument.
func (r TimerRequest) CancelKey() (string, error) {
	if r.Key == nil {
		return "", Errorf(CodeInvalidArgument, "timer_key: required")
	}
	return *r.Key, ValidateTimerKey(*r.Key)
}

// RejectedTimerRequest is a request hourglass could not apply, as
// timer_request_errors keeps it.
type RejectedTimerRequest struct {
	TimerRequest
	RejectedAt time.Time
	Reason     string
}

// TimerRequestsApplied is what one ApplyTimerRequests transaction did.
type TimerRequestsApplied struct {
	// Applied and Rejected count the requests deleted from timer_requests:
	// applied (an arm, a cancel, or a cancel of a timer that had fired or
	// did not exist, which changes nothing) or moved to
	// timer_request_errors.
	Applied, Rejected int
	// Lags are, per request applied or rejected, the time from its
	// requested_at to the commit that applied it.
	Lags []time.Duration
	// Armed are the timers the transaction armed, as due items, and
	// Cancelled the ids of those it cancelled: what the engine must hear.
	Armed     []DueItem
	Cancelled []int64
	// Full reports that the transaction took as many requests as it was
	// allowed: more may be waiting.
	Full bool
}

// TimerRequestStore applies the requests written to timer_requests.
type TimerRequestStore interface {
	// ApplyTimerRequests applies, in one transaction, up to limit of the
	// oldest committed requests (by seq) that no other process is applying,
	// each as ArmTimer or CancelTimer would, in seq order per key (a key
	// whose earlier request another process holds waits), moves the ones
	// it cannot apply to timer_request_errors with their reason, and
	// deletes them all.
	ApplyTimerRequests(ctx context.Context, limit int) (TimerRequestsApplied, error)
	// TimerRequestsWritten fires when requests were committed (PostgreSQL:
	// a trigger's NOTIFY); nil when the store cannot tell, and the
	// applier polls.
	TimerRequestsWritten() <-chan struct{}
	// RejectedTimerRequests lists up to limit rejected requests with seq >
	// after, by seq; RejectedTimerRequestCount counts them.
	RejectedTimerRequests(ctx context.Context, after int64, limit int) ([]RejectedTimerRequest, error)
	RejectedTimerRequestCount(ctx context.Context) (int64, error)
	// PruneRejectedTimerRequests deletes up to limit rejected requests
	// rejected before before, oldest first, and returns how many
	// (retention: shops can write as many bad requests as they like).
	PruneRejectedTimerRequests(ctx context.Context, before time.Time, limit int) (int, error)
}
