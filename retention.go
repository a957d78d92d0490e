package hourglass

import (
	"context"
	"time"
)

// RetentionStore forgets what a client made and nobody needs any more, a
// batch at a time, so that every table a client can grow is bounded by a
// limit or a retention. Each method is one short statement (one
// transaction) that deletes at most limit rows along an index, so a caller
// pruning millions of rows holds no lock for long; it returns how many it
// deleted, and the caller repeats it while that is limit. Methods are safe
// for concurrent use and idempotent; a limit <= 0 deletes nothing. Errors:
// CodeUnavailable when the database cannot be reached.
//
// Times are compared with the stored created_at/updated_at, which are the
// database's now (or the store's test clock) at the write.
type RetentionStore interface {
	// PruneIdempotencyKeys deletes up to limit idempotency keys created
	// before before. A create that replays a forgotten key creates a new
	// order.
	PruneIdempotencyKeys(ctx context.Context, before time.Time, limit int) (int, error)
	// PruneTimers deletes up to limit timers that are fired or cancelled and
	// were last armed, fired or cancelled before before, and up to limit
	// events of timers (timer.fired) written before before that no delivery
	// references any more (the dead letters and pending deliveries keep
	// theirs) and every event sink has published (as PruneEvents). A PUT
	// of a pruned timer's key creates it anew. The timer with the highest
	// id is kept whatever its age: SQLite assigns max(id) + 1,
	// and MySQL before 8.0 resets AUTO_INCREMENT to it at a restart, so
	// deleting it could hand its id out again.
	PruneTimers(ctx context.Context, before time.Time, limit int) (timers, events int, err error)
	// TrimDeadLetters deletes the oldest dead letters (by the time their last
	// attempt was due, then id) beyond the newest keep, at most limit of them,
	// and returns how many it deleted. Their events are left to PruneEvents.
	TrimDeadLetters(ctx context.Context, keep, limit int) (int, error)
}
