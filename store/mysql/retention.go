package mysql

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// Retention (hourglass.RetentionStore, ClusterStore.PruneNodes): each
// method is one autocommit DELETE … LIMIT along an index (migration 0007),
// on the pool, outside the group-commit writers, so pruning never waits
// behind closes nor holds them up.

var _ hourglass.RetentionStore = (*Store)(nil)

// exec runs one autocommit statement (again after a deadlock or lock wait
// timeout) and returns the rows it affected.
func (s *Store) exec(ctx context.Context, op, query string, args ...any) (int, error) {
	var n int64
	err := s.retryStatement(ctx, op, func() error {
		res, err := s.db.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// PruneIdempotencyKeys implements hourglass.RetentionStore along
// idempotency_keys_created_at.
func (s *Store) PruneIdempotencyKeys(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return s.exec(ctx, "prune idempotency keys", `DELETE FROM idempotency_keys WHERE created_at < ? LIMIT ?`, hourglass.UnixMilli(before), limit)
}

// PruneTimers implements hourglass.RetentionStore: the timers along
// timers_status_updated_at, then their events along events_created_at.
// The timer with the highest id stays: MySQL before 8.0 resets
// AUTO_INCREMENT to max(id) + 1 at a restart.
func (s *Store) PruneTimers(ctx context.Context, before time.Time, limit int) (timers, events int, err error) {
	if limit <= 0 {
		return 0, 0, nil
	}
	var top int64
	err = s.retryStatement(ctx, "prune timers", func() error {
		return s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM timers`).Scan(&top)
	})
	if err != nil {
		return 0, 0, err
	}
	timers, err = s.exec(ctx, "prune timers", `DELETE FROM timers WHERE status IN ('fired', 'cancelled') AND updated_at < ? AND id < ? LIMIT ?`,
		hourglass.UnixMilli(before), top, limit)
	if err != nil {
		return 0, 0, err
	}
	events, err = s.exec(ctx, "prune timer events", `DELETE FROM events WHERE created_at < ? AND order_id >= ?
AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = events.seq)
AND NOT EXISTS (SELECT 1 FROM fanout_pending p WHERE FIND_IN_SET(events.seq, p.seqs))
AND `+sinkHoldSQL+`
LIMIT ?`, hourglass.UnixMilli(before), hourglass.TimerIDBase, hourglass.UnixMilli(before), limit)
	return timers, events, err
}

// TrimDeadLetters implements hourglass.RetentionStore: a count of the
// dead letters, then one DELETE of the oldest beyond keep along
// webhook_deliveries_due's 'dead' range.
func (s *Store) TrimDeadLetters(ctx context.Context, keep, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var dead int
	err := s.retryStatement(ctx, "trim dead letters", func() error {
		return s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'dead'`).Scan(&dead)
	})
	if err != nil {
		return 0, err
	}
	n := min(dead-max(keep, 0), limit)
	if n <= 0 {
		return 0, nil
	}
	return s.exec(ctx, "trim dead letters", `DELETE FROM webhook_deliveries WHERE state = 'dead' ORDER BY next_attempt_at, id LIMIT ?`, n)
}

// PruneNodes implements hourglass.ClusterStore, by the database's clock.
func (s *Store) PruneNodes(ctx context.Context, gone time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return s.exec(ctx, "prune nodes", `DELETE FROM cluster_nodes WHERE last_seen < `+dbNowMs+` - ? LIMIT ?`, gone.Milliseconds(), limit)
}
