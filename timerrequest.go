package hourglass

import (
	"context"
	"math"
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
// A listing shows at most the first RejectedTextMax bytes of its
// timer_key, action and payload (whole characters): a shop may have
// written megabytes there.
type RejectedTimerRequest struct {
	TimerRequest
	// PayloadBytes is the payload's size in bytes as the shop wrote it
	// (Payload may be its first RejectedTextMax only); 0 when NULL.
	PayloadBytes int64
	RejectedAt   time.Time
	Reason       string
}

// RejectedTextMax is the most bytes of a rejected request's text column a
// listing shows.
const RejectedTextMax = 1 << 10

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
	// Created counts the arms that created a timer, when the transaction
	// had to tell (its batch could have gone beyond TimerRequestsParams.Room);
	// otherwise 0, and a TimerLimit's next count sees them.
	Created int
}

// TimerRequestsParams is the input of TimerRequestStore.ApplyTimerRequests.
type TimerRequestsParams struct {
	// Limit is the most requests one transaction takes; it must be
	// positive.
	Limit int
	// Room is how many timers the transaction may create (arms of keys
	// that name no timer yet): --timer-max less the timers that exist. An
	// arm beyond it is rejected with TimerLimitError's reason, as PUT
	// answers 409. Zero or less: none; NoTimerLimit: any number.
	Room int64
	// Max is the --timer-max a refusal names.
	Max int64
}

// NoTimerLimit is TimerRequestsParams.Room for an applier without
// --timer-max.
const NoTimerLimit = math.MaxInt64

// TimerRequestStore applies the requests written to timer_requests.
type TimerRequestStore interface {
	// ApplyTimerRequests applies, in one transaction, up to p.Limit of the
	// oldest committed requests (by seq) that no other process is applying,
	// each as PUT or DELETE /v1/timers/{key} would (TimerArm.Params,
	// CheckTimerWebhook, p.Room), in seq order per key (a key whose earlier
	// request another process holds waits), moves the ones it cannot apply
	// to timer_request_errors with their reason, and deletes them all. A
	// text column longer than a valid request's (a payload over
	// MaxTimerPayload) is refused by its size, which the database reads:
	// its bytes never reach the process.
	ApplyTimerRequests(ctx context.Context, p TimerRequestsParams) (TimerRequestsApplied, error)
	// TimerRequestsWritten fires when requests were committed (PostgreSQL:
	// a trigger's NOTIFY); nil when the store cannot tell, and the
	// applier polls.
	TimerRequestsWritten() <-chan struct{}
	// RejectedTimerRequests lists up to limit rejected requests with seq >
	// after, by seq, each with at most the first RejectedTextMax bytes of
	// its text columns (RejectedTimerRequest.PayloadBytes says a payload's
	// size); RejectedTimerRequestCount counts them.
	RejectedTimerRequests(ctx context.Context, after int64, limit int) ([]RejectedTimerRequest, error)
	RejectedTimerRequestCount(ctx context.Context) (int64, error)
	// PruneRejectedTimerRequests deletes up to limit rejected requests
	// rejected before before, oldest first, and returns how many
	// (retention: shops can write as many bad requests as they like).
	PruneRejectedTimerRequests(ctx context.Context, before time.Time, limit int) (int, error)
}
