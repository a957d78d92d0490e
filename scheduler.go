package hourglass

import "context"

// Deliver is how a Scheduler hands due timers (deadline <= now) to the close
// path. It returns nil once their effect is durable (the closes committed);
// the scheduler then acknowledges them. On error the scheduler must deliver
// them again later: delivery is at-least-once, and the close being an
// idempotent compare-and-set makes the effect exactly once.
type Deliver func(ctx context.Context, due []DueItem) error

// Feed says how timers reach a Scheduler.
type Feed int

const (
	// FeedWindow: the scheduler keeps timers in memory; the engine pages the
	// next window of pending orders in from the database (and again after a
	// restart) and schedules new orders that fall inside it.
	FeedWindow Feed = iota
	// FeedOutbox: timers live outside the order database (a broker); each
	// order's transaction writes its timer to an outbox table and the
	// engine's relay publishes it, so nothing is lost between the two.
	FeedOutbox
	// FeedNone: the scheduler reads deadlines from the database itself.
	FeedNone
)

// SchedulerInfo describes a Scheduler's abilities.
type SchedulerInfo struct {
	Name string
	Feed Feed
	// Durable: timers accepted by Schedule survive the crash of this
	// process without help from the database (a broker keeps them).
	Durable bool
}

// Scheduler is a delay mechanism: it holds order deadlines and delivers each
// one when it is due. Implementations are safe for concurrent use.
type Scheduler interface {
	// Info describes the scheduler.
	Info() SchedulerInfo
	// Schedule accepts timers; it returns once they are stored as durably as
	// the mechanism allows (a broker's publisher confirm, for example).
	// Scheduling an order twice is allowed: both may fire, and the second
	// close is a no-op.
	Schedule(ctx context.Context, timers []DueItem) error
	// Run delivers due timers to deliver until ctx ends, then returns nil.
	// It returns an error when it cannot go on (the broker is gone); the
	// caller retries Run with backoff.
	Run(ctx context.Context, deliver Deliver) error
	// Close releases the scheduler's connections. Run must have returned.
	Close() error
}

// Canceler is implemented by schedulers that can drop a timer before it
// fires. Cancel is an optimisation: a stale timer only causes a no-op close.
type Canceler interface {
	Cancel(ctx context.Context, orderIDs []int64) error
}

// Outbox is implemented by stores that keep an outbox of timers for
// FeedOutbox schedulers: every created order's timer is written in the
// order's own transaction.
type Outbox interface {
	// OutboxBatch returns up to limit unsent timers, oldest order first,
	// of the orders in parts (nil: all; see Parts).
	OutboxBatch(ctx context.Context, limit int, parts Parts) ([]DueItem, error)
	// OutboxDone removes timers that were published: each entry whose
	// deadline is still the one published (a client timer re-armed since
	// keeps its new entry, to be published in turn).
	OutboxDone(ctx context.Context, published []DueItem) error
}
