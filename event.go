package hourglass

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/url"
	"strings"
	"time"
)

// EventType names a change of an order's state. Every transition writes one
// event, in the transaction that makes the change (a transactional outbox),
// so an event exists if and only if its change committed.
type EventType string

// The event types, one per transition of the state machine.
const (
	EventOrderCreated   EventType = "order.created"   // a pending order was created and its stock reserved
	EventOrderPaid      EventType = "order.paid"      // paid before its deadline
	EventOrderCancelled EventType = "order.cancelled" // cancelled by the user before paying
	EventOrderClosed    EventType = "order.closed"    // closed by hourglass; the snapshot's close_reason says why
	EventOrderShipped   EventType = "order.shipped"
	EventOrderCompleted EventType = "order.completed"
	// EventOrderExtended: a pending order's deadline was moved later
	// (POST /v1/orders/{id}/extend, or a payment check that answered
	// extend); the snapshot carries the new deadline.
	EventOrderExtended EventType = "order.extended"
)

// EventSourceClosed is written when hourglass closes a row of a shop's own
// table (a source, see Source), in the close's transaction.
const EventSourceClosed EventType = "source.closed"

// EventSourceExpiring is a source row's reminder (Source.RemindBefore): the
// row is still pending and closes at its deadline, RemindBefore from the
// reminder's time. Written at most once per (source, key, deadline), in a
// transaction that checks the row is still pending with that deadline.
const EventSourceExpiring EventType = "source.expiring"

// EventTypeAll subscribes a webhook to every event type, including types
// added in later versions.
const EventTypeAll EventType = "*"

// EventTypes lists every event type: an order's, in lifecycle order, then
// a timer's, then a source row's.
func EventTypes() []EventType {
	return []EventType{EventOrderCreated, EventOrderPaid, EventOrderCancelled, EventOrderClosed, EventOrderShipped, EventOrderCompleted, EventOrderExtended, EventOrderExpiring, EventTimerFired, EventSourceClosed, EventSourceExpiring}
}

// Valid reports whether t is a known event type (EventTypeAll is not one).
func (t EventType) Valid() bool {
	for _, k := range EventTypes() {
		if t == k {
			return true
		}
	}
	return false
}

// EventFor returns the event type of a transition into state to.
func EventFor(to State) EventType {
	switch to {
	case StatePendingPayment:
		return EventOrderCreated
	case StatePaid:
		return EventOrderPaid
	case StateCancelled:
		return EventOrderCancelled
	case StateClosed:
		return EventOrderClosed
	case StateShipped:
		return EventOrderShipped
	case StateCompleted:
		return EventOrderCompleted
	}
	return ""
}

// Event is one committed state change and the order as it was right after it.
type Event struct {
	// ID is unique across databases ("evt_" and 26 random base32
	// characters), so receivers can use it to drop duplicate deliveries.
	ID        string
	Type      EventType
	CreatedAt time.Time // when the change committed (the transaction's now)
	Order     Order
}

// AsOf returns the order as it was right after the transition that wrote an
// event of type t, given o as it is now (at or after that transition).
// Every field of an order is written once and then fixed (paid_at and
// payment_id by pay, closed_at and close_reason by the close), so only the
// status and the fields later transitions set differ; events therefore need
// not copy the order. A change to the state machine that rewrites a field
// must revisit this.
//
// The deadline is the exception: an extension (order.extended) moves it
// later while the order is pending. An order.extended event therefore
// stores its body when it is written (events.body, as timer.fired does),
// so it shows the deadline it set even after a later extension; the other
// events of the order, rendered from the row, show the latest deadline.
func (o Order) AsOf(t EventType) Order {
	switch t {
	case EventOrderCreated, EventOrderExtended, EventOrderExpiring:
		o.Status = StatePendingPayment
		o.PaidAt, o.ClosedAt, o.CloseReason, o.PaymentID = time.Time{}, time.Time{}, "", ""
	case EventOrderPaid:
		o.Status = StatePaid
	case EventOrderShipped:
		o.Status = StateShipped
	case EventOrderCompleted:
		o.Status = StateCompleted
	case EventOrderCancelled:
		o.Status = StateCancelled
	case EventOrderClosed:
		o.Status = StateClosed
	}
	return o
}

// NewEventID returns a new random event id. It never fails.
func NewEventID() string { return "evt_" + rand.Text() }

// TimeFormat is the time format of the API and of event bodies: RFC 3339,
// UTC, exactly three fractional digits.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// orderJSON is the wire form of an order, identical to the API's order
// object (api.OrderJSON; a test in package api keeps the two in step).
type orderJSON struct {
	ID          int64      `json:"id"`
	UserID      string     `json:"user_id"`
	Status      string     `json:"status"`
	Items       []itemJSON `json:"items"`
	CreatedAt   string     `json:"created_at"`
	Deadline    string     `json:"deadline"`
	PaidAt      *string    `json:"paid_at"`
	ClosedAt    *string    `json:"closed_at"`
	CloseReason *string    `json:"close_reason"`
	PaymentID   *string    `json:"payment_id"`
}

type itemJSON struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

type eventJSON struct {
	ID        string    `json:"id"`
	Type      EventType `json:"type"`
	CreatedAt string    `json:"created_at"`
	Order     orderJSON `json:"order"`
}

func formatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatTime(t)
	return &s
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func newOrderJSON(o Order) orderJSON {
	items := make([]itemJSON, len(o.Items))
	for i, it := range o.Items {
		items[i] = itemJSON{SKU: it.SKU, Quantity: it.Quantity}
	}
	return orderJSON{
		ID:          o.ID,
		UserID:      o.UserID,
		Status:      string(o.Status),
		Items:       items,
		CreatedAt:   formatTime(o.CreatedAt),
		Deadline:    formatTime(o.Deadline),
		PaidAt:      optTime(o.PaidAt),
		ClosedAt:    optTime(o.ClosedAt),
		CloseReason: optString(o.CloseReason),
		PaymentID:   optString(o.PaymentID),
	}
}

// MarshalOrder returns o in the JSON shape of the API's order object: every
// field present, unset ones null, times in TimeFormat. It cannot fail.
func MarshalOrder(o Order) []byte {
	b, _ := json.Marshal(newOrderJSON(o)) // only strings, ints and pointers: cannot fail
	return b
}

// MarshalEvent returns the JSON body delivered to webhooks:
// {"id","type","created_at","order":{…}}, the order as MarshalOrder writes
// it. It cannot fail.
func MarshalEvent(e Event) []byte {
	b, _ := json.Marshal(eventJSON{ID: e.ID, Type: e.Type, CreatedAt: formatTime(e.CreatedAt), Order: newOrderJSON(e.Order)})
	return b
}

// Limits on webhooks, enforced by WebhookParams.Validate.
const (
	MinWebhookSecret = 16
	MaxWebhookSecret = 256
	MaxWebhookURL    = 2048
)

// Webhook is a subscription: events of the listed types are POSTed to URL,
// signed with Secret.
type Webhook struct {
	ID        int64
	URL       string
	Events    []EventType // known types, or the single EventTypeAll
	Secret    string      // never shown by the API
	CreatedAt time.Time
}

// Subscribes reports whether w receives events of type t.
func (w Webhook) Subscribes(t EventType) bool {
	for _, e := range w.Events {
		if e == t || e == EventTypeAll {
			return true
		}
	}
	return false
}

// WebhookParams is the input of WebhookStore.CreateWebhook.
type WebhookParams struct {
	URL    string
	Events []EventType
	Secret string
}

// Validate checks the form of p: an absolute http(s) URL with a host and
// without credentials or fragment, at most MaxWebhookURL bytes; 1 or more
// event types, each known or EventTypeAll, none twice; a secret of
// MinWebhookSecret..MaxWebhookSecret bytes; the URL and secret text
// (CheckText). Whether the host may be called is the delivery engine's
// allow-list's business, not checked here. Errors are invalid_argument
// *Error values naming the field.
func (p WebhookParams) Validate() error {
	if p.URL == "" {
		return Errorf(CodeInvalidArgument, "url: required")
	}
	if len(p.URL) > MaxWebhookURL {
		return Errorf(CodeInvalidArgument, "url: at most %d bytes, got %d", MaxWebhookURL, len(p.URL))
	}
	if err := CheckText("url", p.URL); err != nil {
		return err
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		return Errorf(CodeInvalidArgument, "url: %q is not a valid URL", p.URL)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return Errorf(CodeInvalidArgument, "url: scheme must be http or https, got %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return Errorf(CodeInvalidArgument, "url: %q has no host", p.URL)
	}
	if u.User != nil {
		return Errorf(CodeInvalidArgument, "url: must not contain credentials (the signature authenticates deliveries)")
	}
	if u.Fragment != "" || strings.Contains(p.URL, "#") {
		return Errorf(CodeInvalidArgument, "url: must not contain a fragment")
	}
	if len(p.Events) == 0 {
		return Errorf(CodeInvalidArgument, "events: at least one event type is required (or \"*\" for all)")
	}
	seen := make(map[EventType]bool, len(p.Events))
	for i, t := range p.Events {
		if !t.Valid() && t != EventTypeAll {
			return Errorf(CodeInvalidArgument, "events[%d]: unknown event type %q (want \"*\" or one of %v)", i, t, EventTypes())
		}
		if seen[t] {
			return Errorf(CodeInvalidArgument, "events[%d]: %q appears more than once", i, t)
		}
		seen[t] = true
	}
	if seen[EventTypeAll] && len(p.Events) > 1 {
		return Errorf(CodeInvalidArgument, "events: \"*\" already means every type; list it alone")
	}
	if n := len(p.Secret); n < MinWebhookSecret || n > MaxWebhookSecret {
		return Errorf(CodeInvalidArgument, "secret: must be %d to %d bytes, got %d", MinWebhookSecret, MaxWebhookSecret, n)
	}
	if err := CheckText("secret", p.Secret); err != nil {
		return err
	}
	return nil
}

// DeadLetter is a delivery that failed its last attempt. It stays until it is
// retried or deleted.
type DeadLetter struct {
	ID        int64 // the delivery's id
	WebhookID int64
	EventID   string
	EventType EventType
	OrderID   int64
	Attempts  int
	LastError string
	FailedAt  time.Time
}

// DeadLetterFilter selects dead letters for WebhookStore.DeadLetters: by
// id, or by (failure time, id) when a failure range is set. The range is
// half-open, [FailedFrom, FailedBefore): a zero bound is no bound.
type DeadLetterFilter struct {
	WebhookID int64     // 0 for any
	EventType EventType // "" for any
	// FailedFrom and FailedBefore bound the failure time (From inclusive,
	// Before exclusive); either set orders the list by failure time.
	FailedFrom, FailedBefore time.Time
	// After is the cursor: only dead letters after the one with id After
	// in the list's order; by failure time, AfterFailedAt is its failure
	// time. Unset when After is 0.
	After         int64
	AfterFailedAt time.Time
	Limit         int
}

// ByFailedAt says the list is ordered by (failure time, id): a failure
// bound is set.
func (f DeadLetterFilter) ByFailedAt() bool {
	return !f.FailedFrom.IsZero() || !f.FailedBefore.IsZero()
}

// MaxPendingBatch is the most ids DeliveryStore.PendingDeliveries reads at
// once.
const MaxPendingBatch = 256

// CheckPendingBatch reports an invalid_argument error when ids is too long
// for DeliveryStore.PendingDeliveries.
func CheckPendingBatch(ids []int64) error {
	if len(ids) > MaxPendingBatch {
		return Errorf(CodeInvalidArgument, "%d delivery ids; at most %d at once", len(ids), MaxPendingBatch)
	}
	return nil
}

// PendingNotFound is the not_found error of a delivery that is not
// pending (delivered, dead, or deleted with its webhook).
func PendingNotFound(id int64) error {
	return Errorf(CodeNotFound, "pending delivery %d not found", id)
}

// OnePending is DeliveryStore.PendingDelivery written as a batch of one of
// read, the store's PendingDeliveries.
func OnePending(ctx context.Context, read func(context.Context, []int64) ([]PendingDelivery, error), id int64) (PendingDelivery, error) {
	out, err := read(ctx, []int64{id})
	if err != nil {
		return PendingDelivery{}, err
	}
	if len(out) == 0 {
		return PendingDelivery{}, PendingNotFound(id)
	}
	return out[0], nil
}

// DeliveryTimer is when a pending delivery is next due.
type DeliveryTimer struct {
	ID int64
	At time.Time
}

// PendingDelivery is a pending delivery with all it takes to send it.
type PendingDelivery struct {
	ID        int64
	WebhookID int64
	URL       string
	Secret    string
	EventID   string
	EventType EventType
	OrderID   int64
	Body      []byte // the event's JSON (MarshalEvent): the same bytes on every attempt
	// EventCreatedAt is when the event was written (committed, within the
	// store's clock): the start of a delivery's lag.
	EventCreatedAt time.Time
	// Attempts made so far (0 for a new or retried dead letter).
	Attempts      int
	NextAttemptAt time.Time
	// BlockedBy is an earlier pending delivery of the same event stream (same
	// webhook and order) that must finish first, or the zero timer. Events of
	// one order reach a webhook in the order they were written.
	BlockedBy DeliveryTimer
}

// AttemptResult is the outcome of one delivery attempt, for
// DeliveryStore.RecordAttempt.
type AttemptResult struct {
	ID int64
	// Attempts is the delivery's attempt count before this attempt; the
	// record applies only if it is still that (a compare-and-set).
	Attempts int
	// OK: the receiver answered 2xx; the delivery is done.
	OK bool
	// Error describes a failure (status and body excerpt, or the transport error).
	Error string
	// RetryAt is when to try again after a failure; zero makes the delivery a
	// dead letter.
	RetryAt time.Time
	// WebhookID and OrderID name the delivery's event stream, whose next
	// delivery RecordAttempt returns once this one is resolved.
	WebhookID, OrderID int64
	// What the attempt log keeps of it (AttemptLog), besides the above:
	// when it was sent, how long it took, the receiver's HTTP status (0:
	// no answer, or an outcome recorded again after a failed record), and
	// its event. Zero values are kept as unknown.
	At         time.Time
	Duration   time.Duration
	StatusCode int
	EventID    string
	EventType  EventType
}

// Resolves reports whether recording r ends its delivery: delivered, or
// dead (no retry time).
func (r AttemptResult) Resolves() bool { return r.OK || r.RetryAt.IsZero() }

// AttemptRecord is what DeliveryStore.RecordAttempt did.
type AttemptRecord struct {
	// Recorded is false when nothing changed: the delivery was no longer
	// pending with the attempt count the result names.
	Recorded bool
	// Next is, when the attempt resolved the delivery (delivered or dead),
	// the earliest pending delivery left in its stream (AttemptResult's
	// WebhookID and OrderID): the one to send next. Zero when there is none
	// or the delivery stays pending.
	Next DeliveryTimer
}

// WebhookStore keeps webhook subscriptions and dead letters: what the API
// manages. Methods are safe for concurrent use; writes commit durably before
// they return. Errors are *Error values with the codes named, or internal
// errors wrapped with the store and operation.
type WebhookStore interface {
	// CreateWebhook validates p (WebhookParams.Validate) and stores it. When
	// limit > 0 and limit webhooks exist already, it stores nothing and
	// fails with limit_exceeded; the count and the insert are one atomic
	// step, whatever the concurrency. Errors: invalid_argument,
	// limit_exceeded.
	CreateWebhook(ctx context.Context, p WebhookParams, limit int) (Webhook, error)
	// Webhooks returns up to f.Limit webhooks with id > f.After, by id.
	Webhooks(ctx context.Context, f WebhookFilter) ([]Webhook, error)
	// Webhook returns one webhook. Errors: not_found.
	Webhook(ctx context.Context, id int64) (Webhook, error)
	// DeleteWebhook removes a webhook with its pending deliveries and dead
	// letters and returns it. Errors: not_found.
	DeleteWebhook(ctx context.Context, id int64) (Webhook, error)
	// DeadLetters returns up to f.Limit dead letters that match f, after
	// its cursor, by id or by failure time (see DeadLetterFilter).
	DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error)
	// RetryDeadLetter makes a dead letter pending again, due now, with its
	// attempts reset, and returns when it is due. Errors: not_found (no dead
	// letter has that id).
	RetryDeadLetter(ctx context.Context, id int64) (DeliveryTimer, error)
	// DeleteDeadLetter removes a dead letter and returns it. Errors: not_found.
	DeleteDeadLetter(ctx context.Context, id int64) (DeadLetter, error)
	// DeliveryCounts returns the number of pending deliveries and of dead letters.
	DeliveryCounts(ctx context.Context) (pending, dead int, err error)
}

// WebhookFilter selects a page of webhooks for WebhookStore.Webhooks.
type WebhookFilter struct {
	After int64 // only ids greater than After
	Limit int   // the most returned; must be positive
}

// DueDeliveriesParams is the input of DeliveryStore.DueDeliveries: a page of
// pending deliveries in (next attempt, id) order.
type DueDeliveriesParams struct {
	// After and AfterID are the cursor: only deliveries strictly after
	// (After, AfterID) in (next attempt, id) order.
	After   time.Time
	AfterID int64
	// Until is the latest next-attempt time returned.
	Until time.Time
	// Limit is the most returned; it must be positive.
	Limit int
	// Parts, when not nil, keeps only deliveries of orders of these
	// partitions (the ones this node owns); see Parts.
	Parts Parts
}

// DeliveryStore is the webhook delivery queue: one row per (event, matching
// webhook), written in the event's transaction, removed when delivered. A new
// delivery is due at its event's commit time (the database's now). Ids are
// unique but need not grow in commit order (sequences and AUTO_INCREMENT
// hand them out before commit), so readers find new deliveries by due time,
// never by "ids after the last one seen". Methods are safe for concurrent
// use.
type DeliveryStore interface {
	// DueDeliveries returns up to p.Limit pending deliveries due at or
	// before p.Until, ordered by (At, ID) and strictly after the cursor.
	DueDeliveries(ctx context.Context, p DueDeliveriesParams) ([]DeliveryTimer, error)
	// PendingDelivery returns a pending delivery. Errors: not_found (delivered,
	// dead, or deleted with its webhook).
	PendingDelivery(ctx context.Context, id int64) (PendingDelivery, error)
	// PendingDeliveries returns those of ids (at most MaxPendingBatch) that
	// are pending, in one read (one snapshot): what PendingDelivery would
	// return for each, in no particular order; an id that is not pending is
	// left out. Errors: invalid_argument (too many ids).
	PendingDeliveries(ctx context.Context, ids []int64) ([]PendingDelivery, error)
	// RecordAttempt records an attempt's outcome: delivered (the row is
	// removed), retry at r.RetryAt, or dead; once resolved, it also returns
	// the stream's next delivery. It changes nothing (Recorded false) when
	// the delivery is no longer pending with r.Attempts attempts (another
	// attempt recorded first, or its webhook was deleted).
	RecordAttempt(ctx context.Context, r AttemptResult) (AttemptRecord, error)
	// NextDelivery returns the earliest pending delivery of a webhook's event
	// stream for one order, the one to send next; false if there is none.
	NextDelivery(ctx context.Context, webhookID, orderID int64) (DeliveryTimer, bool, error)
	// PruneEvents deletes up to limit events written before before that no
	// delivery references any more and every event sink has published (no
	// SinkCursor of its partition below it, among those touched at or after
	// before: see EventLog), and returns how many it deleted.
	PruneEvents(ctx context.Context, before time.Time, limit int) (int, error)
	// DeliveriesCreated returns a channel that receives a value (coalesced,
	// never blocking the writer) after a commit that created deliveries. It
	// is a hint: it fires for this store value's commits, and for other
	// processes' only where the database can say so (PostgreSQL's NOTIFY);
	// the consumer must also poll DueDeliveries. It has one consumer: the
	// delivery engine.
	DeliveriesCreated() <-chan struct{}
}
