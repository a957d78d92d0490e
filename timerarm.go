package hourglass

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"time"
)

// The rules of an arm, written once: PUT /v1/timers/{key} (package api)
// and a shop's timer_requests row (the applier, store/internal/plan) both
// build a TimerArm and ask its Params, check its webhook with
// CheckTimerWebhook, and refuse a new timer beyond --timer-max with
// TimerLimitError, so that a shop's transaction can arm nothing the API
// would refuse.

// TimerArm is an arm as a client asked for it, before any check: the body
// of PUT /v1/timers/{key}, or a timer_requests row. Every field may hold
// anything.
type TimerArm struct {
	Key string
	// FireAt or DelayMs: exactly one must be set.
	FireAt  *time.Time
	DelayMs *int64
	// Payload is JSON as given; nil or null for none.
	Payload   []byte
	WebhookID *int64
	// RequestedAt, when not zero, is when the arm was asked for (a
	// request's requested_at, the shop's to write): its delay counts from
	// it, or from now if it lies after now, and Params returns an absolute
	// FireAt. When zero (the API), Params returns the Delay, which the store
	// counts from its own now.
	RequestedAt time.Time
}

// Params checks a at now and returns the arm's parameters with the hash
// of its meaning (ArmTimerParams.RequestHash: the same fire_at or delay_ms,
// payload and webhook_id hash alike, so a repeat changes nothing):
//   - the key (ValidateTimerKey);
//   - exactly one of fire_at and delay_ms; a delay of 0 to MaxTimerDelay;
//     a fire_at at most MaxTimerDelay after now, rounded up to the
//     millisecond (a time in the past means now), and a fire_at counted
//     from a delay too;
//   - a payload that is one strict JSON object (ArmTimerParams.Validate);
//   - a webhook_id that is a positive integer (CheckTimerWebhook says
//     whether it names a webhook that takes timer.fired).
//
// Errors are invalid_argument *Error values naming the field. It is pure
// and safe for concurrent use.
func (a TimerArm) Params(now time.Time) (ArmTimerParams, error) {
	p := ArmTimerParams{Key: a.Key}
	if err := ValidateTimerKey(a.Key); err != nil {
		return p, err
	}
	h := sha256.New()
	switch {
	case a.FireAt != nil && a.DelayMs != nil:
		return p, Errorf(CodeInvalidArgument, "fire_at, delay_ms: give exactly one, not both")
	case a.FireAt != nil:
		if a.FireAt.UTC().Year() > 9999 {
			return p, Errorf(CodeInvalidArgument, "fire_at: %s is after 9999-12-31T23:59:59.999Z", a.FireAt.UTC().Format(time.RFC3339Nano))
		}
		// Times are whole milliseconds: round up, so a timer never fires
		// before the time asked for.
		ms := UnixMilli(*a.FireAt)
		if a.FireAt.After(FromUnixMilli(ms)) {
			ms++
		}
		// A time in the past means now, however far back: one before the
		// epoch is sent to the store as the epoch's first millisecond, which
		// is as past as any.
		p.FireAt = FromUnixMilli(max(ms, 1))
		if err := CheckTimerFireAt(p.FireAt, now); err != nil {
			return p, err
		}
		fmt.Fprintf(h, "at\x00%d\x00", UnixMilli(p.FireAt))
	case a.DelayMs != nil:
		ms := *a.DelayMs
		if ms < 0 || ms > MaxTimerDelay.Milliseconds() {
			return p, Errorf(CodeInvalidArgument, "delay_ms: must be 0 to %d, got %d", MaxTimerDelay.Milliseconds(), ms)
		}
		if a.RequestedAt.IsZero() {
			p.Delay = time.Duration(ms) * time.Millisecond
		} else {
			// A requested_at after now (the shop's clock, or a value it
			// wrote) counts as now: a delay never reaches past a year.
			from := a.RequestedAt
			if from.After(now) {
				from = now
			}
			p.FireAt = FromUnixMilli(max(UnixMilli(from)+ms, 1))
		}
		fmt.Fprintf(h, "delay\x00%d\x00", ms)
	default:
		return p, Errorf(CodeInvalidArgument, "fire_at, delay_ms: one of them is required")
	}
	if t := bytes.TrimSpace(a.Payload); a.Payload != nil && !bytes.Equal(t, []byte("null")) {
		p.Payload = t
	}
	if a.WebhookID != nil {
		if *a.WebhookID < 1 {
			return p, Errorf(CodeInvalidArgument, "webhook_id: must be a webhook's id (a positive integer), got %d", *a.WebhookID)
		}
		p.WebhookID = *a.WebhookID
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	// The payload is hashed as given: a retry sends the same bytes.
	fmt.Fprintf(h, "%d\x00%d\x00", p.WebhookID, len(p.Payload))
	h.Write(p.Payload)
	p.RequestHash = h.Sum(nil)
	return p, nil
}

// CheckTimerFireAt refuses a fire_at more than MaxTimerDelay after now,
// as delay_ms is refused beyond it: a timer is for the coming year, not
// for year 9999. Errors: invalid_argument.
func CheckTimerFireAt(fireAt, now time.Time) error {
	if latest := now.Add(MaxTimerDelay); fireAt.After(latest) {
		return Errorf(CodeInvalidArgument, "fire_at: must be at most %d days ahead (%s now), got %s",
			MaxTimerDelay/(24*time.Hour), latest.UTC().Format(TimeFormat), fireAt.UTC().Format(TimeFormat))
	}
	return nil
}

// CheckTimerWebhook refuses a timer's webhook_id (id, not 0) unless w,
// the webhook it names (nil: none does), is subscribed to timer.fired or
// "*": otherwise anyone who may arm a timer could have arbitrary JSON
// signed with that webhook's secret and sent to a receiver that never
// asked for timers. Errors: invalid_argument.
func CheckTimerWebhook(id int64, w *Webhook) error {
	switch {
	case id == 0:
		return nil
	case w == nil:
		return Errorf(CodeInvalidArgument, "webhook_id: webhook %d not found", id)
	case !w.Subscribes(EventTimerFired):
		return Errorf(CodeInvalidArgument, "webhook_id: webhook %d is not subscribed to %s (its events: %v); create one subscribed to %q or \"*\"",
			id, EventTimerFired, w.Events, EventTimerFired)
	}
	return nil
}

// TimerLimitError is the refusal of a new timer when max timers exist
// (--timer-max): limit_exceeded, the API's 409.
func TimerLimitError(max int64) error {
	return Errorf(CodeLimitExceeded,
		"timers: %d timers exist, the most allowed (--timer-max); re-arm or delete existing ones, or wait for fired and cancelled ones to be pruned (--timer-retention)", max)
}
