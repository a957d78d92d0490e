package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hourglass/hourglass/store/internal/fanout"
)

// newFanOut returns the loop that creates the webhook deliveries close
// batches of a burst left in fanout_pending: one close batch per
// transaction, in id order, each once the close path here is quiet, so the
// deliveries exist within moments of the burst's end. Until then the
// events are durable in the same transactions as the closes, and any
// process's loop picks up what a crashed one left.
func (s *Store) newFanOut() *fanout.Loop {
	return fanout.New(fanout.Loop{
		Name:    "mysql",
		Log:     s.log,
		Queue:   s.w,
		One:     s.fanOutOne,
		Before:  s.cfg.beforeFanOut,
		Count:   s.FanoutPending,
		Counted: s.cfg.ObserveFanoutPending,
	})
}

// fanOutOne creates the deliveries of the oldest deferred close batch that
// no other process is fanning out, to the webhooks subscribed now, and
// deletes its row, in one transaction; false when none was left.
func (s *Store) fanOutOne(ctx context.Context) (found bool, err error) {
	var created int64
	err = s.inTx(ctx, "fan out deferred deliveries", func(tx *sql.Tx) error {
		found, created = false, 0
		var (
			id   int64
			list string
		)
		err := tx.QueryRowContext(ctx, `SELECT id, seqs FROM fanout_pending ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&id, &list)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		var seqs []any
		for f := range strings.SplitSeq(list, ",") {
			seq, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return fmt.Errorf("fanout_pending row %d: %w", id, err)
			}
			seqs = append(seqs, seq)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT s.webhook_id, e.seq, e.order_id, 'pending', 0, GREATEST(e.created_at, `+nowExpr+`) FROM events e
JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
WHERE e.seq IN (`+placeholders(len(seqs))+`) LOCK IN SHARE MODE`, append([]any{s.nowArg()}, seqs...)...)
		if err != nil {
			return err
		}
		if created, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM fanout_pending WHERE id = ?`, id)
		return err
	})
	if created > 0 {
		s.w.NotifyDeliveries()
	}
	return found, err
}
