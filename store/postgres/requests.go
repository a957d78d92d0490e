package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// Timer requests (hourglass.TimerRequestStore): rows a shop's transactions
// INSERT into timer_requests (migration 0007), applied here in a
// transaction of their own. It takes the oldest requests no other process
// holds (FOR UPDATE SKIP LOCKED: appliers on several nodes take disjoint
// batches, and none waits on another), holds back a key whose earlier
// request another process holds (so each key's requests take effect in seq
// order), applies the others in rounds (the first request of each key, then
// the second of a key with two, ...) with the statements ArmTimer and
// CancelTimer use (timerWrites), moves those it cannot apply to
// timer_request_errors, deletes them all, and commits: a request is
// applied exactly once, whichever process dies when.

// requestsChannel is the NOTIFY channel of timer_requests' trigger for a
// database and schema (migration 0007 computes the same name).
func requestsChannel(db, schema string) string {
	sum := md5.Sum([]byte(db + "." + schema))
	return "hourglass_timer_requests_" + hex.EncodeToString(sum[:])
}

const (
	lockRequestsSQL = `SELECT seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at
FROM timer_requests ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`
	// heldKeysSQL: the keys of the batch with an earlier request the batch
	// does not hold (another process holds it, or it committed since).
	heldKeysSQL = `SELECT DISTINCT timer_key FROM timer_requests
WHERE timer_key = ANY($1::text[]) AND seq < $2 AND NOT (seq = ANY($3::bigint[]))`
	deleteRequestsSQL = `DELETE FROM timer_requests WHERE seq = ANY($1::bigint[])`
	rejectRequestsSQL = `INSERT INTO timer_request_errors (seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at, rejected_at, reason)
SELECT r.seq, r.timer_key, r.action, r.fire_at, r.delay_ms, r.payload, r.webhook_id, r.requested_at, to_timestamp(COALESCE($2::bigint, ` + dbNow + `) / 1000.0), e.reason
FROM timer_requests r JOIN unnest($1::bigint[], $3::text[]) AS e(seq, reason) ON e.seq = r.seq
ON CONFLICT (seq) DO NOTHING`
)

// TimerRequestsWritten implements hourglass.TimerRequestStore: it fires
// after a transaction that wrote requests committed, on this database and
// schema (the trigger's NOTIFY), and after the listener reconnects.
func (s *Store) TimerRequestsWritten() <-chan struct{} { return s.requestsWritten }

// ApplyTimerRequests implements hourglass.TimerRequestStore. What it arms
// and cancels is announced like ArmTimer's and CancelTimer's: to this
// store's due feed after the commit, and to the other processes at the
// commit. Errors: unavailable.
func (s *Store) ApplyTimerRequests(ctx context.Context, limit int) (hourglass.TimerRequestsApplied, error) {
	var res hourglass.TimerRequestsApplied
	if limit < 1 {
		return res, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", limit)
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, s.fail("apply timer requests", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	rows, err := tx.Query(ctx, lockRequestsSQL, limit)
	if err != nil {
		return res, s.fail("apply timer requests", err)
	}
	reqs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (plan.RequestRow, error) {
		var r plan.RequestRow
		err := row.Scan(&r.Seq, &r.Key, &r.Action, &r.FireAt, &r.DelayMs, &r.Payload, &r.WebhookID, &r.RequestedAt)
		return r, err
	})
	if err != nil {
		return res, s.fail("apply timer requests", err)
	}
	if len(reqs) == 0 {
		return res, nil
	}
	full := len(reqs) == limit
	held, err := s.heldKeys(ctx, tx, reqs)
	if err != nil {
		return res, s.fail("apply timer requests", err)
	}
	p := plan.PlanTimerRequests(reqs, held, s.clockNow())
	// The rounds: the i-th request of each key in round i.
	var armed []*op            // the arms that changed their timer, to announce
	ops := make([]*op, len(p)) // each running request's, by its place in p
	for round := range p.Rounds() {
		tw := &timerWrites{}
		for i, r := range p {
			if !r.Runs() || r.Round != round {
				continue
			}
			if r.Arm != nil {
				ops[i] = &op{kind: opArmTimer, arm: newArmArgs(*r.Arm)}
				tw.arms = append(tw.arms, ops[i])
			} else {
				ops[i] = &op{kind: opCancelTimer, key: r.CancelKey}
				tw.cancels = append(tw.cancels, ops[i])
			}
		}
		b := &pgx.Batch{}
		tw.queue(b, s.nowArg(), s.cfg.Outbox)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return hourglass.TimerRequestsApplied{}, s.fail("apply timer requests", err)
		}
		for i, r := range p {
			if r.Round != round || ops[i] == nil {
				continue
			}
			if err := r.Settle(ops[i].timer, ops[i].err); err != nil {
				return hourglass.TimerRequestsApplied{}, s.fail("apply timer requests", err)
			}
		}
		armed = append(armed, tw.armed...)
	}
	// The other nodes hear of the timers armed at the commit, on the
	// created-orders channel, as of ArmTimer's (writer.go); this node's
	// engine through the store's due feed, below.
	if payloads := s.createdPayloads(nil, armed, nil); len(payloads) > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, s.createdChannel, payloads); err != nil {
			return hourglass.TimerRequestsApplied{}, s.fail("apply timer requests", err)
		}
	}
	done, rejected := p.Outcome()
	if len(rejected) > 0 {
		seqs, reasons := make([]int64, len(rejected)), make([]string, len(rejected))
		for i, r := range rejected {
			seqs[i], reasons[i] = r.Row.Seq, r.Reason
		}
		if _, err := tx.Exec(ctx, rejectRequestsSQL, seqs, s.nowArg(), reasons); err != nil {
			return hourglass.TimerRequestsApplied{}, s.fail("reject timer requests", err)
		}
	}
	if _, err := tx.Exec(ctx, deleteRequestsSQL, done); err != nil {
		return hourglass.TimerRequestsApplied{}, s.fail("apply timer requests", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return hourglass.TimerRequestsApplied{}, s.fail("apply timer requests", err)
	}
	res = p.Result(s.clockNow())
	res.Full = full
	s.w.Announce(hourglass.DueUpdate{Due: res.Armed, Gone: res.Cancelled})
	return res, nil
}

// clockNow is the store's clock (a test's), or the process's.
func (s *Store) clockNow() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock.Now()
	}
	return time.Now()
}

// heldKeys returns the keys of reqs with an earlier request reqs does not
// hold.
func (s *Store) heldKeys(ctx context.Context, tx pgx.Tx, reqs []plan.RequestRow) (map[string]bool, error) {
	held := map[string]bool{}
	keys := plan.HeldKeysToRead(reqs)
	if len(keys) == 0 {
		return held, nil
	}
	seqs := make([]int64, len(reqs))
	for i, r := range reqs {
		seqs[i] = r.Seq
	}
	rows, err := tx.Query(ctx, heldKeysSQL, keys, seqs[len(seqs)-1], seqs)
	if err != nil {
		return nil, err
	}
	ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, k := range ks {
		held[k] = true
	}
	return held, err
}

// wakeRequests fires TimerRequestsWritten without blocking.
func (s *Store) wakeRequests() {
	select {
	case s.requestsWritten <- struct{}{}:
	default:
	}
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
