package hourglass

import (
	"context"
	"time"
	"unicode/utf8"
)

// MaxAttemptsListed is the most delivery attempts AttemptLog.DeliveryAttempts
// returns for one subject.
const MaxAttemptsListed = 1000

// Attempt outcomes, as the attempt log keeps them.
const (
	AttemptDelivered = "delivered" // the receiver answered 2xx
	AttemptRetry     = "retry"     // it failed; another attempt is scheduled
	AttemptDead      = "dead"      // it failed for the last time: a dead letter
)

// DeliveryAttempt is one recorded webhook delivery attempt, as the attempt
// log keeps it: written in the transaction that records the attempt's
// outcome, so a delivered delivery, whose row is deleted, still has its
// story. Pruned with the events (--event-retention).
type DeliveryAttempt struct {
	ID         int64 // the log's own id: ascending in the order attempts were recorded
	OrderID    int64 // the subject of the event: an order's id, Timer.ID, or a source row's
	DeliveryID int64
	WebhookID  int64
	EventID    string
	EventType  EventType
	Attempt    int // 1 for the first attempt of the delivery (a retried dead letter starts again at 1)
	At         time.Time
	Duration   time.Duration
	StatusCode int    // 0: no HTTP answer (or unknown)
	Outcome    string // AttemptDelivered, AttemptRetry or AttemptDead
	Error      string // empty when delivered
}

// AttemptLog is the record of every webhook delivery attempt. Every store
// implements it; the writes come with RecordAttempt.
type AttemptLog interface {
	// DeliveryAttempts returns the latest attempts (at most limit, capped
	// at MaxAttemptsListed) of the deliveries of one subject's events, in
	// the order they were recorded, read through the (order_id, id) index.
	DeliveryAttempts(ctx context.Context, orderID int64, limit int) ([]DeliveryAttempt, error)
	// PruneDeliveryAttempts deletes up to limit attempts recorded before
	// before and returns how many it deleted.
	PruneDeliveryAttempts(ctx context.Context, before time.Time, limit int) (int, error)
}

// MaxAttemptError is the most bytes of an attempt's error the log keeps
// (webhook delivery cuts its errors to as much).
const MaxAttemptError = 1024

// TruncateText returns s cut to at most n bytes, at a UTF-8 boundary.
func TruncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
