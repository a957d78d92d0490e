package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
)

// Retention (hourglass.RetentionStore): each method is one write of at
// most limit rows along an index (migration 0006) in the writer's low
// lane, so it goes into a transaction only with room the closes and the
// API's writes left.

var _ hourglass.RetentionStore = (*Store)(nil)

// prune runs one DELETE binding ?1 to before (unix ms) and ?2 to limit
// (and ?3 to extra, if given), in the low lane, and returns its changes.
func (s *Store) prune(ctx context.Context, op, sql string, before int64, limit int, extra ...int64) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int
	err := s.writeLow(ctx, func(conn *sqlite.Conn, _ time.Time) error {
		stmt := conn.Prep(sql)
		stmt.BindInt64(1, before)
		stmt.BindInt64(2, int64(limit))
		for i, v := range extra {
			stmt.BindInt64(3+i, v)
		}
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: %s: %w", op, err)
		}
		n = conn.Changes()
		return nil
	})
	return n, err
}

// PruneIdempotencyKeys implements hourglass.RetentionStore along
// idempotency_keys_created_at.
func (s *Store) PruneIdempotencyKeys(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.prune(ctx, "prune idempotency keys", `DELETE FROM idempotency_keys WHERE key IN (
	SELECT key FROM idempotency_keys INDEXED BY idempotency_keys_created_at WHERE created_at < ?1 LIMIT ?2)`,
		hourglass.UnixMilli(before), limit)
}

// PruneTimers implements hourglass.RetentionStore: the timers along
// timers_done_updated_at, then their events along events_created_at. The
// timer with the highest id stays: the writer assigns max(id) + 1.
func (s *Store) PruneTimers(ctx context.Context, before time.Time, limit int) (timers, events int, err error) {
	timers, err = s.prune(ctx, "prune timers", `DELETE FROM timers WHERE id IN (
	SELECT id FROM timers INDEXED BY timers_done_updated_at WHERE status <> 'scheduled' AND updated_at < ?1
	AND id < (SELECT max(id) FROM timers) LIMIT ?2)`, hourglass.UnixMilli(before), limit)
	if err != nil {
		return 0, 0, err
	}
	events, err = s.prune(ctx, "prune timer events", `DELETE FROM events WHERE seq IN (
	SELECT e.seq FROM events e WHERE e.created_at < ?1 AND e.order_id >= ?3
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = e.seq)
	AND NOT EXISTS (SELECT 1 FROM fanout_pending p WHERE e.seq BETWEEN p.first_seq AND p.last_seq)
	AND `+sinkHoldSQL+`
	LIMIT ?2)`, hourglass.UnixMilli(before), limit, hourglass.TimerIDBase)
	return timers, events, err
}

// TrimDeadLetters implements hourglass.RetentionStore: one statement that
// counts the dead letters and deletes the oldest beyond keep, along
// webhook_deliveries_due's 'dead' range.
func (s *Store) TrimDeadLetters(ctx context.Context, keep, limit int) (int, error) {
	return s.prune(ctx, "trim dead letters", `DELETE FROM webhook_deliveries WHERE id IN (
	SELECT id FROM webhook_deliveries WHERE state = 'dead' ORDER BY next_attempt_at, id
	LIMIT min(max((SELECT count(*) FROM webhook_deliveries WHERE state = 'dead') - ?1, 0), ?2))`,
		int64(max(keep, 0)), limit)
}
