package postgres

import (
	"context"

	"github.com/hourglass/hourglass/store/internal/fanout"
)

// fanOutOneSQL creates the deliveries of one deferred close batch (the
// oldest not being fanned out by another process) and deletes its row, in
// one statement; it NOTIFYs the deliveries channel ($1) when it created
// any. It returns whether it found a row, and the deliveries created.
//
// The deliveries are due now ($2, the test clock, or the database's), not
// at their events' commit times: a note may be fanned out long after its
// events, and the new-delivery scan of the node owning a partition looks
// only ScanLag back (webhook.ScanLagDefault). A delivery due earlier than
// that would be found by nobody until a restart.
const fanOutOneSQL = `WITH p AS (
	DELETE FROM fanout_pending WHERE id = (SELECT id FROM fanout_pending ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
	RETURNING seqs
), d AS (
	INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
	SELECT s.webhook_id, e.seq, e.order_id, 'pending', GREATEST(e.created_at, COALESCE($2::bigint, ` + dbNow + `))
	FROM p CROSS JOIN LATERAL unnest(p.seqs) AS x(seq) JOIN events e ON e.seq = x.seq
	JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
	RETURNING 1
), n AS (
	SELECT pg_notify($1, '') FROM (SELECT 1 FROM d LIMIT 1) AS x
)
SELECT (SELECT count(*) FROM p), (SELECT count(*) FROM d), (SELECT count(*) FROM n)`

// newFanOut returns the loop that creates the webhook deliveries close
// batches of a burst left in fanout_pending (see batch.go): one close
// batch per statement, in id order, each once the close path here is
// quiet, so the deliveries exist within moments of the burst's end. Until
// then the events are durable in the same transactions as the closes, and
// any process's loop picks up what a crashed one left.
func (s *Store) newFanOut() *fanout.Loop {
	return fanout.New(fanout.Loop{
		Name:    "postgres",
		Log:     s.log,
		Queue:   s.w,
		One:     s.fanOutOne,
		Before:  s.cfg.beforeFanOut,
		Count:   s.FanoutPending,
		Counted: s.cfg.ObserveFanoutPending,
	})
}

// fanOutOne fans out one deferred close batch; false when none was left.
func (s *Store) fanOutOne(ctx context.Context) (bool, error) {
	var found, created, notified int64
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, fanOutOneSQL, s.channel, s.nowArg()).Scan(&found, &created, &notified)
	})
	if err != nil {
		return false, s.fail("fan out", err)
	}
	if created > 0 {
		s.w.NotifyDeliveries()
	}
	return found > 0, nil
}
