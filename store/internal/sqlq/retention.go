package sqlq

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// Retention (hourglass.RetentionStore, ClusterStore.PruneNodes): each
// method deletes at most limit rows along an index (the stores' retention
// migrations), in one short transaction of its own outside the group
// commit (SQLite: in the writer's low lane), so pruning never waits behind
// closes nor holds them up. A limit under 1 deletes nothing.

// SinkHold is the condition the prunes of events add for an event row
// named event: no event sink's cursor of its partition is below it,
// counting only cursors touched at or after before (the placeholder bound
// to the prune's before, unix ms), so a sink removed from the
// configuration stops holding events one retention after its last
// publish. 64 is hourglass.Partitions.
func SinkHold(event, before string) string {
	return `NOT EXISTS (SELECT 1 FROM event_sink_cursors c
	WHERE c.part = ` + event + `.order_id % 64 AND c.seq < ` + event + `.seq AND c.touched_at >= ` + before + `)`
}

// deleteSome returns a DELETE of at most limit rows of table matching
// where (its limit the last placeholder), in orderBy's order if it is not
// "": MySQL's DELETE … LIMIT, or elsewhere the rows whose key a subquery
// selects, read through index unless it is "".
func (s *Store) deleteSome(table, key, index, where, orderBy string) string {
	if orderBy != "" {
		orderBy = ` ORDER BY ` + orderBy
	}
	if s.d.DeleteLimit {
		return `DELETE FROM ` + table + ` WHERE ` + where + orderBy + ` LIMIT ?`
	}
	from := table
	if index != "" {
		from = s.d.From(table, index)
	}
	return `DELETE FROM ` + table + ` WHERE ` + key + ` IN (SELECT ` + key + ` FROM ` + from + ` WHERE ` + where + orderBy + ` LIMIT ?)`
}

// prune runs query, a deleteSome, in its own transaction in the low lane
// and returns the rows it deleted.
func (s *Store) prune(ctx context.Context, op, query string, args ...any) (int, error) {
	var n int64
	err := s.write(ctx, op, Low, func(x q) error {
		var err error
		n, err = x.exec(ctx, query, args...)
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
	return s.prune(ctx, "prune idempotency keys",
		s.deleteSome("idempotency_keys", "key", "idempotency_keys_created_at", `created_at < ?`, ""),
		hourglass.UnixMilli(before), limit)
}

// PruneTimers implements hourglass.RetentionStore: the timers along their
// done timers' updated_at index (timers_done_updated_at, MySQL's
// timers_status_updated_at), then their events along events_created_at,
// each in its own transaction. The timer with the highest id stays: SQLite
// assigns max(id) + 1, MySQL before 8.0 resets AUTO_INCREMENT to it at a
// restart. The status is tested twice on purpose: SQLite and PostgreSQL use
// their partial index only for its own predicate (<> 'scheduled'), MySQL
// reads two ranges of (status, updated_at) only for the IN.
func (s *Store) PruneTimers(ctx context.Context, before time.Time, limit int) (timers, events int, err error) {
	if limit <= 0 {
		return 0, 0, nil
	}
	ms := hourglass.UnixMilli(before)
	del := s.deleteSome("timers", "id", "timers_done_updated_at",
		`status <> 'scheduled' AND status IN ('fired', 'cancelled') AND updated_at < ? AND id < ?`, "")
	err = s.write(ctx, "prune timers", Low, func(x q) error {
		var top int64
		if _, err := x.row(ctx, `SELECT COALESCE(max(id), 0) FROM timers`, nil, &top); err != nil {
			return err
		}
		n, err := x.exec(ctx, del, ms, top, limit)
		timers = int(n)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	events, err = s.prune(ctx, "prune timer events", s.deleteSome("events", "seq", "", `created_at < ? AND order_id >= ?
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = events.seq)
	AND NOT EXISTS (SELECT 1 FROM fanout_pending p WHERE `+s.d.FanoutLists("events.seq")+`)
	AND `+SinkHold("events", "?"), ""), ms, hourglass.TimerIDBase, ms, limit)
	return timers, events, err
}

// PruneEvents implements hourglass.DeliveryStore: one DELETE along
// events_created_at. Events still referenced by a pending delivery or a
// dead letter, whose deliveries are still to be created (fanout_pending),
// or not published by an event sink yet (SinkHold), are kept whatever
// their age.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	ms := hourglass.UnixMilli(before)
	return s.prune(ctx, "prune events", s.deleteSome("events", "seq", "", `created_at < ?
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = events.seq)
	AND NOT EXISTS (SELECT 1 FROM fanout_pending p WHERE `+s.d.FanoutLists("events.seq")+`)
	AND `+SinkHold("events", "?"), "created_at"), ms, ms, limit)
}

// TrimDeadLetters implements hourglass.RetentionStore: in one
// transaction, a count of the dead letters, then one DELETE of the oldest
// beyond keep along webhook_deliveries_due's 'dead' range.
func (s *Store) TrimDeadLetters(ctx context.Context, keep, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	del := s.deleteSome("webhook_deliveries", "id", "", `state = 'dead'`, "next_attempt_at, id")
	var n int64
	err := s.write(ctx, "trim dead letters", Low, func(x q) error {
		n = 0
		var dead int
		if _, err := x.row(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'dead'`, nil, &dead); err != nil {
			return err
		}
		if excess := min(dead-max(keep, 0), limit); excess > 0 {
			var err error
			n, err = x.exec(ctx, del, excess)
			return err
		}
		return nil
	})
	return int(n), err
}

// PruneNodes implements hourglass.ClusterStore, by the database's clock
// (as heartbeats write last_seen), along cluster_nodes' primary key.
func (c Cluster) PruneNodes(ctx context.Context, gone time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	s := c.s
	return s.prune(ctx, "prune nodes", s.deleteSome("cluster_nodes", "id", "", `last_seen < `+s.d.Now+` - ?`, ""),
		nil, gone.Milliseconds(), limit)
}
