package sqlite

import (
	"github.com/hourglass/hourglass"
)

var _ hourglass.EventLog = (*Store)(nil)

// sinkHoldSQL is the condition PruneEvents and PruneTimers add for an
// event e: no event sink's cursor of e's partition is below it, counting
// only cursors touched at or after ?1 (the prune's before), so a sink
// removed from the configuration stops holding events one retention after
// its last publish. 64 is hourglass.Partitions.
const sinkHoldSQL = `NOT EXISTS (SELECT 1 FROM event_sink_cursors c
	WHERE c.part = e.order_id % 64 AND c.seq < e.seq AND c.touched_at >= ?1)`
