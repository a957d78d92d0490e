package postgres

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// Retention (hourglass.RetentionStore, ClusterStore.PruneNodes): each
// method is one autocommit DELETE of at most limit rows along an index
// (migration 0005), on the pool, outside the group-commit writer, so
// pruning never waits behind closes nor holds them up.

var _ hourglass.RetentionStore = (*Store)(nil)

const (
	pruneIdempotencyKeysSQL = `DELETE FROM idempotency_keys WHERE key IN (
	SELECT key FROM idempotency_keys WHERE created_at < $1 LIMIT $2)`
	pruneTimersSQL = `DELETE FROM timers WHERE id IN (
	SELECT id FROM timers WHERE status <> 'scheduled' AND updated_at < $1
	AND id < (SELECT max(id) FROM timers) LIMIT $2)`
	// pruneTimerEventsSQL is PruneEvents' statement for timers' events
	// only: order ids at or above hourglass.TimerIDBase (2^62).
	pruneTimerEventsSQL = `DELETE FROM events WHERE seq IN (
	SELECT e.seq FROM events e WHERE e.created_at < $1 AND e.order_id >= 4611686018427387904
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = e.seq)
	AND NOT EXISTS (SELECT 1 FROM fanout_pending p WHERE e.seq = ANY (p.seqs))
	AND ` + sinkHoldSQL + `
	LIMIT $2)`
	// trimDeadLettersSQL deletes min($2, dead letters - $1) of the oldest
	// dead letters, along webhook_deliveries_due's 'dead' range.
	trimDeadLettersSQL = `WITH excess AS (
	SELECT least(greatest(count(*) - $1, 0), $2) AS n FROM webhook_deliveries WHERE state = 'dead')
DELETE FROM webhook_deliveries WHERE id IN (
	SELECT id FROM webhook_deliveries WHERE state = 'dead' ORDER BY next_attempt_at, id
	LIMIT (SELECT n FROM excess))`
	pruneNodesSQL = `DELETE FROM cluster_nodes WHERE id IN (
	SELECT id FROM cluster_nodes WHERE last_seen < ` + dbNow + ` - $1 LIMIT $2)`
)

// exec runs one autocommit statement (again after a serialization failure
// or deadlock) and returns the rows it affected.
func (s *Store) exec(ctx context.Context, op, sql string, args ...any) (int, error) {
	var n int
	err := s.retry(ctx, func() error {
		ct, err := s.pool.Exec(ctx, sql, args...)
		n = int(ct.RowsAffected())
		return err
	})
	if err != nil {
		return 0, s.fail(op, err)
	}
	return n, nil
}

// PruneIdempotencyKeys implements hourglass.RetentionStore along
// idempotency_keys_created_at.
func (s *Store) PruneIdempotencyKeys(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return s.exec(ctx, "prune idempotency keys", pruneIdempotencyKeysSQL, hourglass.UnixMilli(before), limit)
}

// PruneTimers implements hourglass.RetentionStore: the timers along
// timers_done_updated_at, then their events along events_created_at.
func (s *Store) PruneTimers(ctx context.Context, before time.Time, limit int) (timers, events int, err error) {
	if limit <= 0 {
		return 0, 0, nil
	}
	if timers, err = s.exec(ctx, "prune timers", pruneTimersSQL, hourglass.UnixMilli(before), limit); err != nil {
		return 0, 0, err
	}
	events, err = s.exec(ctx, "prune timer events", pruneTimerEventsSQL, hourglass.UnixMilli(before), limit)
	return timers, events, err
}

// TrimDeadLetters implements hourglass.RetentionStore: one statement that
// counts the dead letters and deletes the oldest beyond max.
func (s *Store) TrimDeadLetters(ctx context.Context, keep, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return s.exec(ctx, "trim dead letters", trimDeadLettersSQL, max(keep, 0), limit)
}

// PruneNodes implements hourglass.ClusterStore, by the database's clock.
func (s *Store) PruneNodes(ctx context.Context, gone time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return s.exec(ctx, "prune nodes", pruneNodesSQL, gone.Milliseconds(), limit)
}
