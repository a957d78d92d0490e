package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hourglass/hourglass"
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
	reqs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.TimerRequest, error) {
		var r hourglass.TimerRequest
		err := row.Scan(&r.Seq, &r.Key, &r.Action, &r.FireAt, &r.DelayMs, &r.Payload, &r.WebhookID, &r.RequestedAt)
		return r, err
	})
	if err != nil {
		return res, s.fail("apply timer requests", err)
	}
	if len(reqs) == 0 {
		return res, nil
	}
	res.Full = len(reqs) == limit
	held, err := s.heldKeys(ctx, tx, reqs)
	if err != nil {
		return res, s.fail("apply timer requests", err)
	}
	now := s.clockNow()
	plan := planRequests(reqs, held, now)
	// The rounds: the i-th request of each key in round i.
	var armed []*op // the arms that changed their timer, to announce
	for _, round := range plan.rounds {
		tw := &timerWrites{}
		for _, pr := range round {
			if pr.arm != nil {
				tw.arms = append(tw.arms, pr.op)
			} else {
				tw.cancels = append(tw.cancels, pr.op)
			}
		}
		b := &pgx.Batch{}
		tw.queue(b, s.nowArg(), s.cfg.Outbox)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return hourglass.TimerRequestsApplied{}, s.fail("apply timer requests", err)
		}
		for _, pr := range round {
			plan.settle(pr)
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
	done, seqs, reasons := plan.outcome()
	if len(reasons) > 0 {
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
	committed := s.clockNow()
	res.Applied, res.Rejected = len(done)-len(reasons), len(reasons)
	res.Armed, res.Cancelled = plan.endStates()
	s.w.Announce(hourglass.DueUpdate{Due: res.Armed, Gone: res.Cancelled})
	for _, pr := range plan.all {
		if !pr.held {
			res.Lags = append(res.Lags, max(committed.Sub(pr.req.RequestedAt), 0))
		}
	}
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
func (s *Store) heldKeys(ctx context.Context, tx pgx.Tx, reqs []hourglass.TimerRequest) (map[string]bool, error) {
	var keys []string
	seqs := make([]int64, len(reqs))
	for i, r := range reqs {
		seqs[i] = r.Seq
		if r.Key != nil {
			keys = append(keys, *r.Key)
		}
	}
	held := map[string]bool{}
	if len(keys) == 0 {
		return held, nil
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

// plannedRequest is one request of a batch and what it became.
type plannedRequest struct {
	req    hourglass.TimerRequest
	arm    *hourglass.ArmTimerParams // nil: a cancel (or rejected)
	op     *op
	reason string // rejected: why
	held   bool   // left for a later batch
}

// requestPlan is a batch of requests, decided: rejected now, held back, or
// in a round of writes.
type requestPlan struct {
	all    []*plannedRequest
	rounds [][]*plannedRequest
}

// planRequests decides each request of reqs (in seq order) at now: the
// keys in held wait, a request that is not a valid arm or cancel is
// rejected with its reason, the others go into rounds.
func planRequests(reqs []hourglass.TimerRequest, held map[string]bool, now time.Time) *requestPlan {
	p := &requestPlan{}
	perKey := map[string]int{}
	for _, r := range reqs {
		pr := &plannedRequest{req: r}
		p.all = append(p.all, pr)
		if r.Key != nil && held[*r.Key] {
			pr.held = true
			continue
		}
		switch r.Action {
		case hourglass.TimerRequestArm:
			a, err := r.ArmParams(now)
			if err != nil {
				pr.reason = reason(err)
				continue
			}
			pr.arm = &a
			pr.op = &op{kind: opArmTimer, arm: newArmArgs(a)}
		case hourglass.TimerRequestCancel:
			key, err := r.CancelKey()
			if err != nil {
				pr.reason = reason(err)
				continue
			}
			pr.op = &op{kind: opCancelTimer, key: key}
		default:
			pr.reason = fmt.Sprintf("action: must be %q or %q, got %q", hourglass.TimerRequestArm, hourglass.TimerRequestCancel, r.Action)
			continue
		}
		i := perKey[*r.Key]
		perKey[*r.Key] = i + 1
		if i == len(p.rounds) {
			p.rounds = append(p.rounds, nil)
		}
		p.rounds[i] = append(p.rounds[i], pr)
	}
	return p
}

// reason is a rejection's text: the error's message, without the store's
// prefix.
func reason(err error) string {
	var he *hourglass.Error
	if errors.As(err, &he) {
		return he.Message
	}
	return err.Error()
}

// settle records what a write of a round answered: an arm refused (a
// webhook that does not exist) is rejected; a cancel of a timer that fired
// or does not exist changes nothing and counts as applied.
func (p *requestPlan) settle(pr *plannedRequest) {
	err := pr.op.err
	if err == nil {
		return
	}
	switch hourglass.ErrorCode(err) {
	case hourglass.CodeNotFound, hourglass.CodeTimerFired:
		if pr.arm == nil {
			pr.op.err = nil
			pr.op.timer = hourglass.Timer{}
			return
		}
	}
	pr.reason = reason(err)
}

// outcome returns the seqs done (applied or rejected) and, for the
// rejected ones, their seqs and reasons.
func (p *requestPlan) outcome() (done, rejected []int64, reasons []string) {
	for _, pr := range p.all {
		if pr.held {
			continue
		}
		done = append(done, pr.req.Seq)
		if pr.reason != "" {
			rejected = append(rejected, pr.req.Seq)
			reasons = append(reasons, pr.reason)
		}
	}
	return done, rejected, reasons
}

// endStates returns what the batch left due and no longer due: each key
// it wrote once, as the last request that changed its timer left it
// (armed, as a due item; cancelled, as an id). The engine must hear only
// each key's end state.
func (p *requestPlan) endStates() (armed []hourglass.DueItem, cancelled []int64) {
	var keys []string
	timers, arm := map[string]hourglass.Timer{}, map[string]bool{}
	for _, pr := range p.all {
		if pr.held || pr.reason != "" || pr.op == nil || pr.op.timer.ID == 0 {
			continue
		}
		t := pr.op.timer
		if _, ok := timers[t.Key]; !ok {
			keys = append(keys, t.Key)
		}
		timers[t.Key], arm[t.Key] = t, pr.arm != nil
	}
	for _, k := range keys {
		if t := timers[k]; arm[k] {
			armed = append(armed, hourglass.DueItem{ID: t.ID, At: t.FireAt})
		} else {
			cancelled = append(cancelled, t.ID)
		}
	}
	return armed, cancelled
}

// wakeRequests fires TimerRequestsWritten without blocking.
func (s *Store) wakeRequests() {
	select {
	case s.requestsWritten <- struct{}{}:
	default:
	}
}

// RejectedTimerRequests implements hourglass.TimerRequestStore. Errors:
// invalid_argument (a limit under 1), unavailable.
func (s *Store) RejectedTimerRequests(ctx context.Context, after int64, limit int) ([]hourglass.RejectedTimerRequest, error) {
	if limit < 1 {
		return nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at, rejected_at, reason
FROM timer_request_errors WHERE seq > $1 ORDER BY seq LIMIT $2`, after, limit)
	if err != nil {
		return nil, s.fail("rejected timer requests", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.RejectedTimerRequest, error) {
		var r hourglass.RejectedTimerRequest
		var action *string
		err := row.Scan(&r.Seq, &r.Key, &action, &r.FireAt, &r.DelayMs, &r.Payload, &r.WebhookID, &r.RequestedAt, &r.RejectedAt, &r.Reason)
		if action != nil {
			r.Action = *action
		}
		return r, err
	})
	return out, s.fail("rejected timer requests", err)
}

// RejectedTimerRequestCount implements hourglass.TimerRequestStore.
func (s *Store) RejectedTimerRequestCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM timer_request_errors`).Scan(&n)
	return n, s.fail("count rejected timer requests", err)
}

// PruneRejectedTimerRequests implements hourglass.TimerRequestStore.
func (s *Store) PruneRejectedTimerRequests(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM timer_request_errors WHERE seq IN (
	SELECT seq FROM timer_request_errors WHERE rejected_at < $1 ORDER BY seq LIMIT $2)`, before, limit)
	if err != nil {
		return 0, s.fail("prune rejected timer requests", err)
	}
	return int(tag.RowsAffected()), nil
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
