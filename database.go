package hourglass

import (
	"context"
	"time"
)

// StatsStore answers the read-only questions of alerts and the dashboard.
// Each is one bounded query that reads indexes, never the whole orders table.
// Methods are safe for concurrent use.
type StatsStore interface {
	// OrderCounts returns how many orders are in each state at now, as the
	// API shows them (Order.View): a pending order at or past its deadline
	// counts as closed. Every state is present in the map.
	OrderCounts(ctx context.Context, now time.Time) (map[State]int64, error)
	// CountPendingDue returns how many pending orders have a deadline at or
	// before until, counting at most limit of them (limit <= 0: no cap).
	CountPendingDue(ctx context.Context, until time.Time, limit int) (int, error)
	// PendingDeadlineBuckets returns n counts of pending orders by deadline:
	// bucket i holds those with from + i*width < deadline <= from +
	// (i+1)*width. width must be at least 1 ms and n in 1..10000, else an
	// error.
	PendingDeadlineBuckets(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error)
	// FanoutPending returns how many close batches of a burst have their
	// webhook deliveries still to be created (the fanout_pending table,
	// near empty outside a burst). Errors: unavailable.
	FanoutPending(ctx context.Context) (int, error)
}

// EventRecord is one stored event, as Database.OrderEvents returns it.
type EventRecord struct {
	Seq       int64 // the order events of one order were written in
	ID        string
	Type      EventType
	OrderID   int64
	CreatedAt time.Time
	Body      []byte // as delivered to webhooks (MarshalEvent)
}

// Database is the whole surface a database adapter implements: what the
// engine, the API, webhook delivery, the event sinks, the timer_requests
// applier, alerts and the dashboard need of it. store/sqlite,
// store/postgres and store/mysql implement it (each asserts it at compile
// time), and hourglasstest.ExerciseStore checks every method of it. The
// abilities only some stores have are separate interfaces (ClusterStore,
// SourceStore); a caller that needs one it lacks returns an error naming
// the store and the feature.
type Database interface {
	Store
	WebhookStore
	DeliveryStore
	Outbox
	StatsStore
	TimerStore
	RetentionStore
	DueFeed
	EventLog
	TimerRequestStore
	ReminderStore
	OrderViewer
	HistoryStore
	AttemptLog
	BulkStore
	// OrderEvents returns the events of an order that have not been pruned,
	// in the order they were written (for tests and debugging: it may scan).
	OrderEvents(ctx context.Context, orderID int64) ([]EventRecord, error)
	// Close releases the database's connections after the writes in flight.
	// It is idempotent.
	Close() error
}
