package postgres

import (
	"context"
	"time"
)

const (
	// fanOutCheck is how often fanOutLoop looks at fanout_pending without
	// a wake-up (another process's deferred batches, a failed attempt), and
	// fanOutPoll how often it asks whether closes are still queued.
	fanOutCheck = time.Second
	fanOutPoll  = 5 * time.Millisecond
	// fanOutMaxWait bounds how long one deferred fan-out waits for the
	// close path to have no queue, so a close path that is never idle
	// delays deliveries but cannot stop them.
	fanOutMaxWait = time.Second
)

// fanOutOneSQL creates the deliveries of one deferred close batch (the
// oldest not being fanned out by another process) and deletes its row, in
// one statement; it NOTIFYs the deliveries channel ($1) when it created
// any. It returns whether it found a row, and the deliveries created.
const fanOutOneSQL = `WITH p AS (
	DELETE FROM fanout_pending WHERE id = (SELECT id FROM fanout_pending ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
	RETURNING seqs
), d AS (
	INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
	SELECT s.webhook_id, e.seq, e.order_id, 'pending', e.created_at
	FROM p CROSS JOIN LATERAL unnest(p.seqs) AS x(seq) JOIN events e ON e.seq = x.seq
	JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
	RETURNING 1
), n AS (
	SELECT pg_notify($1, '') FROM (SELECT 1 FROM d LIMIT 1) AS x
)
SELECT (SELECT count(*) FROM p), (SELECT count(*) FROM d), (SELECT count(*) FROM n)`

// fanOutLoop creates the webhook deliveries that close batches of a burst
// left in fanout_pending (see writer.go): one close batch per statement, in
// id order, each once no close is queued here (or after fanOutMaxWait), so
// the deliveries exist within moments of the burst's end. Until then the
// events are durable in the same transactions as the closes, and any
// process's loop picks up what a crashed one left. It runs until ctx ends.
func (s *Store) fanOutLoop(ctx context.Context) {
	defer s.wg.Done()
	tick := time.NewTicker(fanOutCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.pendingFanOut.channel():
		case <-tick.C:
		}
		for {
			if !s.waitForClosePath(ctx) {
				return
			}
			if s.cfg.beforeFanOut != nil {
				s.cfg.beforeFanOut()
			}
			found, err := s.fanOutOne(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("postgres: creating deferred webhook deliveries failed; retrying", "retry_in", fanOutCheck, "err", s.fail("fan out", err))
				}
				break
			}
			if !found {
				break
			}
		}
	}
}

// waitForClosePath waits until no close is queued for the writer, at most
// fanOutMaxWait; false when ctx ends.
func (s *Store) waitForClosePath(ctx context.Context) bool {
	if s.queue.Urgent() == 0 {
		return true
	}
	giveUp := time.NewTimer(fanOutMaxWait)
	defer giveUp.Stop()
	poll := time.NewTicker(fanOutPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-giveUp.C:
			return true
		case <-poll.C:
			if s.queue.Urgent() == 0 {
				return true
			}
		}
	}
}

// fanOutOne fans out one deferred close batch; false when none was left.
func (s *Store) fanOutOne(ctx context.Context) (bool, error) {
	var found, created, notified int64
	err := s.retry(func() error {
		return s.pool.QueryRow(ctx, fanOutOneSQL, s.channel).Scan(&found, &created, &notified)
	})
	if err != nil {
		return false, err
	}
	if created > 0 {
		s.deliveries.notify()
	}
	return found > 0, nil
}
