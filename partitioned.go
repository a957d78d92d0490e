package hourglass

import (
	"context"
	"time"
)

// Partitioned is implemented by schedulers whose timers several nodes share
// (a broker): each node must deliver only the timers of the partitions it
// owns (PartitionOf(order id)), because the engine of a node that does not
// own a timer's partition drops it, and a broker that counted such a drop
// as a delivery would leave the deadline to the sweeper. A scheduler that
// is not Partitioned keeps its timers in this process (the wheel, the
// heap), or reads them from the database through the owned partitions
// (sqlpoll).
//
// Own says which partitions this node owns from now on: nil means every
// partition (one node; the state before the first call), an empty non-nil
// Parts none. From then on Run consumes only the timers of parts, wherever
// Schedule was called, and a timer of another partition that it holds (it
// fetched it before the change, or read it from a queue all nodes share)
// is handed back to the mechanism for its owner, never delivered and
// never dropped. A partition gained is consumed within about a second.
// Own must not block (the engine calls it from the ownership tracker's
// callback); it is idempotent and safe for concurrent use, before, during
// and between Runs.
type Partitioned interface {
	Own(parts Parts)
}

// Reclaiming is implemented by a Partitioned scheduler whose timers a node
// that dies may hold, fetched and not acknowledged, until the broker's own
// timeout gives them to another (NATS: the consumer's ack wait).
// ReclaimHorizon is how far ahead of now such held timers may be due. When
// a node gains a partition, its engine schedules again the partition's
// deadlines within that horizon through Reclaim, so that they fire on time
// from the new owner; the copies the dead node held fire later, into no-op
// closes.
//
// Reclaim schedules timers as Schedule does, but as new copies: a broker
// that drops a publish it has seen (NATS's Nats-Msg-Id within the stream's
// duplicate window) must not take them for the copies the dead node holds,
// or they would wait out the broker's timeout after all. Each call's
// copies are new, even of timers an earlier Reclaim sent.
type Reclaiming interface {
	ReclaimHorizon() time.Duration
	Reclaim(ctx context.Context, timers []DueItem) error
}
