package hourglass

import (
	"context"
	"time"
)

// Bounds of a history (HistoryParams).
const (
	// HistoryEventsMax is the most events a history returns: the latest.
	HistoryEventsMax = 200
	// HistoryDeliveriesMax is the most webhook deliveries a history
	// returns: the earliest of its events'.
	HistoryDeliveriesMax = 500
)

// HistoryParams is the input of HistoryStore.History.
type HistoryParams struct {
	// Subject is the id an order's, a timer's or a source row's events
	// carry (an order's id, Timer.ID, SourceEventOrderID).
	Subject int64
	// MaxEvents and MaxDeliveries bound the answer (zero or out of
	// range: HistoryEventsMax, HistoryDeliveriesMax).
	MaxEvents, MaxDeliveries int
}

// History is one subject's events and their webhook deliveries, as
// stored.
type History struct {
	// Events are the latest MaxEvents events, in the order they were
	// written; EventsTruncated says there were earlier ones (or pruned
	// ones: retention prunes old events, so a history may start later).
	Events          []HistoryEvent
	EventsTruncated bool
	// Deliveries are the stored deliveries of Events (pending or dead: a
	// delivered one is deleted when it succeeds), by id, at most
	// MaxDeliveries; DeliveriesTruncated says there were more.
	Deliveries          []HistoryDelivery
	DeliveriesTruncated bool
}

// HistoryEvent is one event of a history. Body is the stored body (an
// order.extended's, a timer.fired's, a source.closed's; an order.expiring's
// as delivered, rendered with the deadline stored with it; nil for the
// others, which are rendered from the order's row). By is an order.closed's or a
// timer.fired's provenance; zero when none was recorded.
type HistoryEvent struct {
	Seq       int64
	ID        string
	Type      EventType
	CreatedAt time.Time
	Body      []byte
	By        Closer
}

// HistoryDelivery is a stored webhook delivery of a history's event.
type HistoryDelivery struct {
	ID        int64
	WebhookID int64
	EventSeq  int64
	// State is "pending" or "dead".
	State         string
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	FailedAt      time.Time // zero unless dead
}

// HistoryStore reads one subject's history. Every read goes through an
// index (events by (order_id, seq), deliveries by event_seq). Safe for
// concurrent use. Errors: unavailable.
type HistoryStore interface {
	History(ctx context.Context, p HistoryParams) (History, error)
	// SourceClosedEvents returns up to limit (1 to SourceClosedScanMax)
	// source.closed events with seq > after, by seq, with their bodies,
	// through an index of those events only (GET
	// /v1/sources/{name}/rows?status=closed).
	SourceClosedEvents(ctx context.Context, after int64, limit int) ([]HistoryEvent, error)
}

// SourceClosedScanMax is the most source.closed events one list request
// reads: a page of one source's closed rows may end before its limit, with
// a next, when other sources' closes fill the read.
const SourceClosedScanMax = 5000

// Bounded returns p with its bounds applied.
func (p HistoryParams) Bounded() HistoryParams {
	if p.MaxEvents <= 0 || p.MaxEvents > HistoryEventsMax {
		p.MaxEvents = HistoryEventsMax
	}
	if p.MaxDeliveries <= 0 || p.MaxDeliveries > HistoryDeliveriesMax {
		p.MaxDeliveries = HistoryDeliveriesMax
	}
	return p
}
