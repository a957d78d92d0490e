package hourglass

import (
	"context"
	"time"
)

// SinkCursor is how far an event sink (package eventsink) has published one
// partition's events: every event of the partition with a seq at or below
// Seq is on the sink's bus. A cursor that is not touched for longer than the
// event retention is ignored by PruneEvents and PruneTimers (its sink was
// removed from every node's configuration), so a sink that is gone cannot
// hold the events table for ever.
type SinkCursor struct {
	Sink string // the sink's redacted URL: its identity
	Part int    // the partition, PartitionOf(events.order_id)
	Seq  int64
}

// EventPage selects a page of the event log for EventLog.Events: the
// events with After < seq <= Until (Until 0: no upper bound), in seq order,
// at most Limit (positive) of them.
type EventPage struct {
	After, Until int64
	Limit        int
}

// EventLog is the events table read in seq order, for the event sinks, and
// the sinks' cursors. Seqs are unique and, for the events of one order or
// timer, grow in the order the events were written; across orders they need
// not grow in commit order (sequences and AUTO_INCREMENT hand them out
// before commit), and some are never used (a rolled-back transaction's).
// Methods are safe for concurrent use. Errors: CodeUnavailable when the
// database cannot be reached, else internal errors wrapped with the store
// and the operation.
type EventLog interface {
	// Events returns a page of events, every partition's, with each body
	// as delivered to webhooks (MarshalEvent, or the stored body of a
	// timer's or a source's event).
	Events(ctx context.Context, p EventPage) ([]EventRecord, error)
	// SinkCursors returns sink's cursors (of every partition that has one).
	SinkCursors(ctx context.Context, sink string) ([]SinkCursor, error)
	// SaveSinkCursors writes cursors, each raised to its Seq and never
	// lowered (a node that lost a partition cannot move its new owner's
	// cursor back), and marks them touched at now. It is idempotent.
	SaveSinkCursors(ctx context.Context, cursors []SinkCursor, now time.Time) error
}
