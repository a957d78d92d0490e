package plan

import (
	"time"

	"github.com/hourglass/hourglass"
)

// The refusals every store answers with, each with one code and one
// message: a client sees the same error whichever store it runs on.

// OrderNotFound is the refusal of order id, which does not exist.
func OrderNotFound(id int64) error {
	return hourglass.Errorf(hourglass.CodeNotFound, "order %d not found", id)
}

// ProductNotFound is the refusal of product sku, which does not exist.
func ProductNotFound(sku string) error {
	return hourglass.Errorf(hourglass.CodeNotFound, "product %q not found", sku)
}

// TimerNotFound is the refusal of timer key, which does not exist.
func TimerNotFound(key string) error {
	return hourglass.Errorf(hourglass.CodeNotFound, "timer %q not found", key)
}

// TimerFired is the refusal of a cancel of timer key, which fired at
// firedAt.
func TimerFired(key string, firedAt time.Time) error {
	return hourglass.Errorf(hourglass.CodeTimerFired, "timer %q fired at %s; re-arm it instead", key, firedAt.Format(hourglass.TimeFormat))
}

// UnknownWebhook is the refusal of an arm naming webhook id, which does
// not exist: the arm's argument is invalid.
func UnknownWebhook(id int64) error {
	return hourglass.Errorf(hourglass.CodeInvalidArgument, "webhook_id: webhook %d not found", id)
}

// WebhookNotFound is the refusal of webhook id, which does not exist.
func WebhookNotFound(id int64) error {
	return hourglass.Errorf(hourglass.CodeNotFound, "webhook %d not found", id)
}

// DeadLetterNotFound is the refusal of dead letter id, which does not
// exist.
func DeadLetterNotFound(id int64) error {
	return hourglass.Errorf(hourglass.CodeNotFound, "dead letter %d not found", id)
}
