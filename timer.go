package hourglass

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/hourglass/hourglass/internal/strictjson"
)

// Timers for anything: a client arms a timer under a key of its own and
// hourglass fires it once, at its time, across crashes, with the same
// engine, stores, delay mechanisms and nodes that close orders. Firing
// writes one timer.fired event (delivered to webhooks like order events) in
// the transaction that moves the timer to fired.
//
// A timer has an internal id besides its key. Timer ids start at
// TimerIDBase, far above any order id, so an id alone says which of the two
// it is: timers and orders share the columns and messages that carry "the
// id of what is due" (DueItem.ID, the timer outbox, the created-orders
// feed between nodes, a delay mechanism's messages, events' and webhook
// deliveries' order_id, and the partition of an id, PartitionOf) without a
// second copy of any of them.

// TimerIDBase is the first timer id; order ids stay below it (an order
// store would need 2^62 orders to reach it).
const TimerIDBase int64 = 1 << 62

// IsTimerID reports whether id is a timer's id (TimerIDBase or above)
// rather than an order's.
func IsTimerID(id int64) bool { return id >= TimerIDBase }

// Limits on timers, enforced by ArmTimerParams.Validate.
const (
	MaxTimerKey     = 200
	MaxTimerPayload = 64 << 10
	// MaxTimerDelay is the longest delay_ms: 365 days.
	MaxTimerDelay = 365 * 24 * time.Hour
)

// TimerStatus is the state of a Timer.
type TimerStatus string

// Timer statuses. PUT moves a timer of any status to scheduled (a re-arm);
// the engine (or its sweeper) moves a scheduled timer to fired at its time;
// DELETE moves a scheduled or cancelled one to cancelled.
const (
	TimerScheduled TimerStatus = "scheduled"
	TimerFired     TimerStatus = "fired"
	TimerCancelled TimerStatus = "cancelled"
)

// Valid reports whether s is one of the three statuses.
func (s TimerStatus) Valid() bool {
	return s == TimerScheduled || s == TimerFired || s == TimerCancelled
}

// EventTimerFired is written when a timer fires; its body carries the timer
// (MarshalTimerEvent).
const EventTimerFired EventType = "timer.fired"

// Timer is a client's timer as stored. Zero times and WebhookID 0 mean
// unset.
type Timer struct {
	// ID is internal (TimerIDBase or above): the API names timers by Key.
	ID     int64
	Key    string
	Status TimerStatus
	FireAt time.Time
	// FiredAt is the database time the fire committed; zero unless fired.
	FiredAt time.Time
	// Payload is the JSON object given when armed, or nil when none was.
	Payload json.RawMessage
	// WebhookID, when not 0, is the only webhook its timer.fired event is
	// delivered to; otherwise every webhook subscribed to timer.fired.
	WebhookID int64
	CreatedAt time.Time
	// UpdatedAt is when it was last armed, cancelled or fired.
	UpdatedAt time.Time
}

// ArmTimerParams is the input of TimerStore.ArmTimer.
type ArmTimerParams struct {
	Key string
	// FireAt, when not zero, is when to fire; a time in the past (by the
	// database's clock) means now. Otherwise the timer fires Delay after
	// the database's now.
	FireAt time.Time
	Delay  time.Duration
	// Payload is a JSON object (or nil), stored and returned as given.
	Payload   json.RawMessage
	WebhookID int64
	// RequestHash identifies the request's values (api hashes fire_at or
	// delay_ms, payload and webhook_id): arming a scheduled timer again
	// with the same hash changes nothing, so a client's retry is safe.
	RequestHash []byte
}

// Validate checks p's form: a key of 1..MaxTimerKey characters of
// A-Za-z0-9._:-, a Delay within 0..MaxTimerDelay, a payload of at most
// MaxTimerPayload bytes that is one JSON object keeping the API's rules
// (package strictjson: UTF-8 without NUL or unpaired surrogates, no key
// twice, bounded nesting), a WebhookID that is not negative. Errors are invalid_argument *Error values naming the field.
func (p ArmTimerParams) Validate() error {
	if err := ValidateTimerKey(p.Key); err != nil {
		return err
	}
	if p.Delay < 0 || p.Delay > MaxTimerDelay {
		return Errorf(CodeInvalidArgument, "delay_ms: must be 0 to %d, got %d", MaxTimerDelay.Milliseconds(), p.Delay.Milliseconds())
	}
	if len(p.Payload) > MaxTimerPayload {
		return Errorf(CodeInvalidArgument, "payload: at most %d bytes, got %d", MaxTimerPayload, len(p.Payload))
	}
	if p.Payload != nil {
		// The API's rules for JSON (strictjson): one object, UTF-8 without
		// NUL or unpaired surrogates, no key twice, bounded nesting.
		if err := strictjson.Object("payload", p.Payload); err != nil {
			return Errorf(CodeInvalidArgument, "%s", err.Error())
		}
	}
	if p.WebhookID < 0 {
		return Errorf(CodeInvalidArgument, "webhook_id: must be a webhook's id, got %d", p.WebhookID)
	}
	return nil
}

// ValidateTimerKey checks a timer key: 1..MaxTimerKey characters, each one
// of A-Za-z0-9._:- . Errors are invalid_argument *Error values.
func ValidateTimerKey(key string) error {
	if key == "" || len(key) > MaxTimerKey {
		return Errorf(CodeInvalidArgument, "key: must be 1 to %d characters, got %d", MaxTimerKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return Errorf(CodeInvalidArgument, "key: character %d (%q) is not one of A-Za-z0-9._:-", i+1, rune(c))
		}
	}
	return nil
}

// TimerFilter selects a page of timers for TimerStore.Timers: by key, or
// by (fire time, id) when a fire range is set. The range is half-open,
// [FireFrom, FireBefore): a zero bound is no bound. Every combination is
// read from an index on every store.
type TimerFilter struct {
	Status TimerStatus // "" for every status
	// Prefix, when set, keeps the keys that start with it.
	Prefix string
	// FireFrom and FireBefore bound fire_at (From inclusive, Before
	// exclusive); either set orders the list by fire time.
	FireFrom, FireBefore time.Time
	// After is the cursor of a list by key: only keys greater than After
	// (bytewise).
	After string
	// AfterFireAt and AfterID are the cursor of a list by fire time: only
	// timers after the one with id AfterID, which fires at AfterFireAt
	// (unset when AfterID is 0).
	AfterFireAt time.Time
	AfterID     int64
	Limit       int // the most returned; must be positive
}

// ByFireAt says the list is ordered by (fire time, id): a fire bound is set.
func (f TimerFilter) ByFireAt() bool { return !f.FireFrom.IsZero() || !f.FireBefore.IsZero() }

// FiredTimer is a timer TimerStore.FireTimers fired.
type FiredTimer struct {
	ID      int64
	Key     string
	FireAt  time.Time
	FiredAt time.Time
}

// CodeTimerFired: a fired timer cannot be cancelled (re-arm it instead).
const CodeTimerFired Code = "timer_fired"

// ErrTimerFired is returned by CancelTimer for a timer that fired.
var ErrTimerFired = &Error{Code: CodeTimerFired, Message: "timer already fired"}

// TimerStore keeps clients' timers. Methods are safe for concurrent use;
// writes commit durably before they return; "now" is the database's clock,
// as for orders (see Store). Errors are *Error values with the codes named,
// CodeUnavailable when the database cannot be reached, or internal errors
// wrapped with the store and operation.
//
// Every arming that leaves a timer scheduled does what CreateOrder does for
// an order's deadline: it writes the timer's id and fire time to the outbox
// when the store keeps one (hourglass.Outbox) and announces it to other
// nodes like a created order (ClusterStore.WatchCreated), so the engine
// schedules it with the same mechanism.
type TimerStore interface {
	// ArmTimer creates the timer p.Key (created=true), or re-arms an
	// existing one whatever its status: scheduled again with p's values,
	// fired_at cleared. When the timer is scheduled and p.RequestHash equals
	// the hash it was armed with, nothing changes and it is returned as it
	// is. Errors: invalid_argument (p.Validate; a WebhookID that names no
	// webhook, message naming it).
	ArmTimer(ctx context.Context, p ArmTimerParams) (t Timer, created bool, err error)
	// Timer returns a timer by key. Errors: not_found.
	Timer(ctx context.Context, key string) (Timer, error)
	// Timers returns up to f.Limit timers that match f, after its cursor,
	// by key or by fire time (see TimerFilter).
	Timers(ctx context.Context, f TimerFilter) ([]Timer, error)
	// CancelTimer moves a scheduled timer to cancelled and returns it; a
	// cancelled one is returned unchanged (idempotent). Errors: not_found,
	// timer_fired.
	CancelTimer(ctx context.Context, key string) (Timer, error)
	// FireTimers fires, in one transaction, each listed timer that is still
	// scheduled with fire_at <= now: status fired, fired_at now, and one
	// timer.fired event (body MarshalTimerEvent of the fired timer) with its
	// webhook deliveries (to WebhookID's webhook only, none if it was
	// deleted since; without one, to every webhook subscribed to
	// timer.fired or "*"). Like CloseOrders
	// it is idempotent: any other listed id is skipped and not reported.
	FireTimers(ctx context.Context, ids []int64) ([]FiredTimer, error)
	// TimersDue returns up to p.Limit scheduled timers with fire_at <=
	// p.Until, as DueItem{ID: id, At: fire_at}, ordered by
	// (fire_at, id), strictly after the cursor, in p.Parts (see
	// Store.PendingDue).
	TimersDue(ctx context.Context, p PendingDueParams) ([]DueItem, error)
	// TimerCounts returns how many timers are in each status (every status
	// present in the map).
	TimerCounts(ctx context.Context) (map[TimerStatus]int64, error)
}

// timerJSON is the wire form of a timer, identical to the API's timer object.
type timerJSON struct {
	Key       string          `json:"key"`
	Status    string          `json:"status"`
	FireAt    string          `json:"fire_at"`
	FiredAt   *string         `json:"fired_at"`
	Payload   json.RawMessage `json:"payload"`
	WebhookID *int64          `json:"webhook_id"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
}

func newTimerJSON(t Timer) timerJSON {
	j := timerJSON{
		Key:       t.Key,
		Status:    string(t.Status),
		FireAt:    formatTime(t.FireAt),
		FiredAt:   optTime(t.FiredAt),
		Payload:   t.Payload,
		CreatedAt: formatTime(t.CreatedAt),
		UpdatedAt: formatTime(t.UpdatedAt),
	}
	if j.Payload == nil {
		j.Payload = json.RawMessage("null")
	}
	if t.WebhookID != 0 {
		id := t.WebhookID
		j.WebhookID = &id
	}
	return j
}

// MarshalTimer returns t in the JSON shape of the API's timer object:
// {"key","status","fire_at","fired_at","payload","webhook_id","created_at",
// "updated_at"}, unset ones null. t.Payload must be valid JSON (stores keep
// only what ArmTimerParams.Validate accepted); otherwise it returns nil.
func MarshalTimer(t Timer) []byte { return marshalRaw(newTimerJSON(t)) }

// marshalRaw is json.Marshal without HTML escaping (a payload's <, > and &
// stay as given), or nil when v cannot be encoded.
func marshalRaw(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

type timerEventJSON struct {
	ID        string    `json:"id"`
	Type      EventType `json:"type"`
	CreatedAt string    `json:"created_at"`
	Timer     timerJSON `json:"timer"`
}

// MarshalTimerEvent returns the JSON body of a timer.fired event delivered
// to webhooks: {"id","type":"timer.fired","created_at","timer":{…}}, the
// timer as MarshalTimer writes it, created_at its fired_at. Stores write it
// at the fire and keep it with the event (a re-arm later changes the timer,
// not the event). It returns nil when t.Payload is not valid JSON.
func MarshalTimerEvent(id string, t Timer) []byte {
	return marshalRaw(timerEventJSON{ID: id, Type: EventTimerFired, CreatedAt: formatTime(t.FiredAt), Timer: newTimerJSON(t)})
}
