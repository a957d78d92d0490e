package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
)

// Timer requests (hourglass.TimerRequestStore): rows a shop's transactions
// INSERT into timer_requests (migration 0009), from the shop's own database
// by qualified name (an InnoDB transaction spans the databases of one
// server), applied here in a transaction of their own:
//
//  1. lock the oldest requests no other transaction holds: SELECT … ORDER
//     BY seq LIMIT ? FOR UPDATE SKIP LOCKED (appliers on several nodes take
//     disjoint batches and none waits on another; a shop's uncommitted
//     request is locked by its INSERT, so it is skipped too);
//  2. hold back a key with an earlier request the batch does not hold
//     (another applier holds it, or it committed since): each key's
//     requests take effect in seq order;
//  3. decide each request in Go (hourglass.TimerRequest.ArmParams or
//     CancelKey: the API's checks and request hash, a delay counted from
//     requested_at) and run the valid ones, in seq order, as one group
//     commit batch of ArmTimer's and CancelTimer's ops runs them (batch.go,
//     timerbatch.go: the same locks, decisions and statements), inside
//     this transaction. The batch decides its ops one after the other on
//     the locked rows in memory, so a key's second request sees its first
//     (an arm then a cancel ends cancelled) and every timer row is written
//     once: the rounds PostgreSQL needs are one batch here;
//  4. move the requests that cannot be applied (refused by ArmParams, or
//     by the batch: an unknown webhook_id) to timer_request_errors with
//     their reason; a cancel of a timer that fired or does not exist
//     changes nothing and counts as applied, as DELETE /v1/timers/{key}
//     would leave it;
//  5. delete them all, and commit.
//
// A deadlock, a lock wait timeout, a racing creation of the same key (a
// duplicate key) or, on Galera, a lost certification (two nodes' appliers
// took the same rows: SKIP LOCKED sees a node's own locks only) rolls it all
// back and runs it again (retryPolicy): a request is applied exactly once,
// whichever process dies when. Under REPEATABLE READ (a server logging
// binlog_format=STATEMENT, see connect) step 1 also locks the gap after the
// last row: a shop's INSERT then waits for the applier's commit, a few
// milliseconds, and is never refused.
//
// MySQL cannot tell a process that requests were committed (there is no
// NOTIFY): TimerRequestsWritten is nil and the applier polls.

// sinceEpoch reads a DATETIME(3) column, written in UTC, as microseconds
// since the Unix epoch without the session's time zone (DATETIME has none),
// over the whole DATETIME range; NULL for a zero date ('0000-00-00', which
// a shop's lax sql_mode may write).
func sinceEpoch(column string) string {
	return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + column + `)`
}

// requestColumns are a timer_requests row as scanRequest reads it.
var requestColumns = `seq, timer_key, action, fire_at IS NOT NULL, ` + sinceEpoch("fire_at") + `, delay_ms, payload, webhook_id, ` + sinceEpoch("requested_at")

var (
	lockRequestsSQL = `SELECT ` + requestColumns + ` FROM timer_requests ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED`
	// heldKeysSQL: of the keys given, those with an earlier request the
	// batch does not hold. A plain read: it sees committed rows, locked or
	// not. Its arguments: the batch's last seq, its seqs, the keys.
	heldKeysSQL = `SELECT DISTINCT timer_key FROM timer_requests WHERE seq < ? AND seq NOT IN (%s) AND timer_key IN (%s)`
)

// requestRow is a timer_requests row, read: badTime names a DATETIME column
// that holds no time (a zero date), which rejects the request.
type requestRow struct {
	hourglass.TimerRequest
	badTime string
}

// scanRequest reads requestColumns, followed by extra destinations.
func scanRequest(sc scanner, extra ...any) (requestRow, error) {
	var (
		r              requestRow
		action         sql.NullString
		fireSet        bool
		fireUs, reqUs  sql.NullInt64
		key, payload   *string
		delay, webhook *int64
	)
	dest := append([]any{&r.Seq, &key, &action, &fireSet, &fireUs, &delay, &payload, &webhook, &reqUs}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return r, err
	}
	r.Key, r.Action, r.DelayMs, r.Payload, r.WebhookID = key, action.String, delay, payload, webhook
	if fireSet {
		at := time.Time{}
		if fireUs.Valid {
			at = time.UnixMicro(fireUs.Int64).UTC()
		} else {
			r.badTime = "fire_at"
		}
		r.FireAt = &at
	}
	if reqUs.Valid {
		r.RequestedAt = time.UnixMicro(reqUs.Int64).UTC()
	} else {
		r.badTime = "requested_at"
	}
	return r, nil
}

// TimerRequestsWritten implements hourglass.TimerRequestStore: nil, since
// MySQL cannot say when requests were committed; the applier polls.
func (s *Store) TimerRequestsWritten() <-chan struct{} { return nil }

// ApplyTimerRequests implements hourglass.TimerRequestStore (the steps
// above), in one transaction, run again after a lost race (retryPolicy).
// It takes at most Config.MaxBatch requests whatever limit says, so that
// its statements stay well under max_allowed_packet, as a group commit's
// do (Full then says more may be waiting). It is safe for concurrent use,
// by any number of store values and processes. Errors: invalid_argument (a
// limit under 1), unavailable (the outcome of the commit may then be
// unknown: the requests it applied are gone, the others are still there
// for the next call).
func (s *Store) ApplyTimerRequests(ctx context.Context, limit int) (hourglass.TimerRequestsApplied, error) {
	if limit < 1 {
		return hourglass.TimerRequestsApplied{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", limit)
	}
	limit = min(limit, cmp.Or(s.cfg.MaxBatch, MaxBatchDefault))
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	var res hourglass.TimerRequestsApplied
	err := s.retry(func() error {
		var err error
		res, err = s.applyRequests(ctx, limit)
		return err
	})
	if err != nil {
		return hourglass.TimerRequestsApplied{}, fail("apply timer requests", err)
	}
	return res, nil
}

// applyRequests is one attempt of ApplyTimerRequests. Its errors are the
// driver's, wrapped.
func (s *Store) applyRequests(ctx context.Context, limit int) (hourglass.TimerRequestsApplied, error) {
	var res hourglass.TimerRequestsApplied
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return res, err
	}
	committed := false
	defer func() {
		if !committed {
			tx.Rollback()
		}
	}()
	// 1. The oldest requests no one holds.
	reqs, err := collect(ctx, tx, lockRequestsSQL, []any{limit}, func(rows *sql.Rows) (requestRow, error) { return scanRequest(rows) })
	if err != nil {
		return res, fmt.Errorf("lock timer requests: %w", err)
	}
	if len(reqs) == 0 {
		return res, nil
	}
	res.Full = len(reqs) == limit
	// 2. The keys to hold back.
	held, err := heldKeys(ctx, tx, reqs)
	if err != nil {
		return res, fmt.Errorf("read held timer requests: %w", err)
	}
	// 3. Decided on now (the server's clock, or the test's), then run as a
	// batch of ArmTimer's and CancelTimer's ops.
	nowMs, err := s.now(ctx, tx)
	if err != nil {
		return res, fmt.Errorf("read now: %w", err)
	}
	clock := cmp.Or[hourglass.Clock](s.clock, hourglass.SystemClock{})
	read := clock.Now()
	now := hourglass.FromUnixMilli(nowMs)
	plan := planRequests(reqs, held, now)
	b := &batch{s: s, ops: plan.ops, results: make([]opResult, len(plan.ops)), timers: &batchTimers{}, tx: tx}
	deferred := false
	if len(b.ops) > 0 {
		b.collect()
		if err := b.lock(ctx); err != nil {
			return res, err
		}
		if err := b.decide(); err != nil {
			return res, err
		}
		if _, deferred, err = b.write(ctx); err != nil {
			return res, err
		}
	}
	plan.settle(b.results)
	// 4. The rejected ones, as the shop wrote them, with their reasons.
	done, rejected := plan.outcome()
	if len(rejected) > 0 {
		args := make([]any, 0, 1+3*len(rejected))
		args = append(args, now)
		for _, pr := range rejected {
			args = append(args, pr.req.Seq)
		}
		for _, pr := range rejected {
			args = append(args, pr.reason)
		}
		for _, pr := range rejected {
			args = append(args, pr.req.Seq)
		}
		n := len(rejected)
		// A seq listed already (timer_requests' AUTO_INCREMENT set back) keeps
		// its first rejection, as on PostgreSQL.
		if _, err := tx.ExecContext(ctx, `INSERT INTO timer_request_errors
	(seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at, rejected_at, reason)
SELECT r.seq, r.timer_key, r.action, r.fire_at, r.delay_ms, r.payload, r.webhook_id, r.requested_at, ?,
	ELT(FIELD(r.seq, `+placeholders(n)+`), `+placeholders(n)+`)
FROM timer_requests r WHERE r.seq IN (`+placeholders(n)+`)
ON DUPLICATE KEY UPDATE timer_request_errors.seq = timer_request_errors.seq`, args...); err != nil {
			return res, fmt.Errorf("reject timer requests: %w", err)
		}
	}
	if len(done) == 0 {
		return res, nil // every key held back: nothing to write
	}
	// 5. All of them gone, and commit.
	if _, err := tx.ExecContext(ctx, `DELETE FROM timer_requests WHERE seq IN (`+placeholders(len(done))+`)`, anys(done)...); err != nil {
		return res, fmt.Errorf("delete timer requests: %w", err)
	}
	committed = true
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("commit timer requests: %w", err)
	}
	if deferred {
		s.fanOut.Wake()
	}
	elapsed := max(clock.Now().Sub(read), 0)
	res.Applied, res.Rejected = len(done)-len(rejected), len(rejected)
	res.Armed, res.Cancelled = plan.final(b)
	// This node's engine hears of them through the store's due feed (the
	// others through the order_feed row b.write wrote).
	s.w.Announce(hourglass.DueUpdate{Due: res.Armed, Gone: res.Cancelled})
	for _, pr := range plan.all {
		if !pr.held {
			res.Lags = append(res.Lags, max(now.Sub(pr.req.RequestedAt)+elapsed, 0))
		}
	}
	return res, nil
}

// heldKeys returns the keys of reqs with an earlier request reqs does not
// hold. Only valid keys are looked up: a request with any other is
// rejected whatever came before it.
func heldKeys(ctx context.Context, tx *sql.Tx, reqs []requestRow) (map[string]bool, error) {
	seqs := make([]any, 0, len(reqs))
	var keys []any
	for _, r := range reqs {
		seqs = append(seqs, r.Seq)
		if r.Key != nil && hourglass.ValidateTimerKey(*r.Key) == nil {
			keys = append(keys, *r.Key)
		}
	}
	held := map[string]bool{}
	if len(keys) == 0 {
		return held, nil
	}
	args := append(append([]any{reqs[len(reqs)-1].Seq}, seqs...), keys...)
	err := eachRow(ctx, tx, fmt.Sprintf(heldKeysSQL, placeholders(len(seqs)), placeholders(len(keys))), args, func(rows *sql.Rows) error {
		var k string
		err := rows.Scan(&k)
		held[k] = true // compared with the batch's keys exactly, below
		return err
	})
	return held, err
}

// plannedRequest is one request of a batch and what it became.
type plannedRequest struct {
	req    hourglass.TimerRequest
	op     int    // its op's index in requestPlan.ops, else -1
	reason string // rejected: why
	held   bool   // left for a later batch
}

// requestPlan is a batch of requests, decided: held back, rejected, or an
// op of the batch that applies them.
type requestPlan struct {
	all []*plannedRequest
	ops []*op // ArmTimer's and CancelTimer's, in seq order
}

// planRequests decides each request of reqs (in seq order) at now: the
// keys in held wait, a request that is not a valid arm or cancel is
// rejected with its reason, the others become ops.
func planRequests(reqs []requestRow, held map[string]bool, now time.Time) *requestPlan {
	p := &requestPlan{}
	for _, r := range reqs {
		pr := &plannedRequest{req: r.TimerRequest, op: -1}
		p.all = append(p.all, pr)
		if r.Key != nil && held[*r.Key] {
			pr.held = true
			continue
		}
		if r.badTime != "" {
			pr.reason = r.badTime + ": not a valid time (a zero date)"
			continue
		}
		var o *op
		switch r.Action {
		case hourglass.TimerRequestArm:
			a, err := r.ArmParams(now)
			if err != nil {
				pr.reason = reason(err)
				continue
			}
			o = &op{kind: opArm, arm: a}
		case hourglass.TimerRequestCancel:
			key, err := r.CancelKey()
			if err != nil {
				pr.reason = reason(err)
				continue
			}
			o = &op{kind: opCancel, key: key}
		default:
			pr.reason = fmt.Sprintf("action: must be %q or %q, got %q", hourglass.TimerRequestArm, hourglass.TimerRequestCancel, r.Action)
			continue
		}
		pr.op = len(p.ops)
		p.ops = append(p.ops, o)
	}
	return p
}

// reason is a rejection's text: the error's message, without a package's
// prefix.
func reason(err error) string {
	var he *hourglass.Error
	if errors.As(err, &he) {
		return he.Message
	}
	return err.Error()
}

// settle records what the batch decided for each op: an arm refused (a
// webhook that does not exist) is rejected; a cancel of a timer that fired
// or does not exist changes nothing and counts as applied.
func (p *requestPlan) settle(results []opResult) {
	for _, pr := range p.all {
		if pr.op < 0 {
			continue
		}
		err := results[pr.op].err
		if err == nil {
			continue
		}
		switch hourglass.ErrorCode(err) {
		case hourglass.CodeNotFound, hourglass.CodeTimerFired:
			if p.ops[pr.op].kind == opCancel {
				continue
			}
		}
		pr.reason = reason(err)
	}
}

// outcome returns the seqs done (applied or rejected), and the rejected
// requests.
func (p *requestPlan) outcome() (done []int64, rejected []*plannedRequest) {
	for _, pr := range p.all {
		if pr.held {
			continue
		}
		done = append(done, pr.req.Seq)
		if pr.reason != "" {
			rejected = append(rejected, pr)
		}
	}
	return done, rejected
}

// final returns, once b committed, each key's end state, in the order the
// keys first appear: armed (as a due item) or cancelled (its id); the
// engine must hear only that. A key whose requests changed nothing (a
// cancel of a timer that does not exist) is in neither.
func (p *requestPlan) final(b *batch) (armed []hourglass.DueItem, cancelled []int64) {
	seen := map[*lockedTimer]bool{}
	var timers []*lockedTimer
	for _, pr := range p.all {
		if pr.op < 0 || pr.reason != "" {
			continue
		}
		if lt := b.timerOf[pr.op]; lt != nil && !seen[lt] {
			seen[lt] = true
			timers = append(timers, lt)
		}
	}
	for _, lt := range timers {
		switch lt.t.Status {
		case hourglass.TimerScheduled:
			armed = append(armed, hourglass.DueItem{ID: lt.t.ID, At: lt.t.FireAt})
		case hourglass.TimerCancelled:
			cancelled = append(cancelled, lt.t.ID)
		}
	}
	return armed, cancelled
}

// RejectedTimerRequests implements hourglass.TimerRequestStore: a range of
// timer_request_errors' primary key. Errors: invalid_argument (a limit
// under 1), unavailable.
func (s *Store) RejectedTimerRequests(ctx context.Context, after int64, limit int) ([]hourglass.RejectedTimerRequest, error) {
	if limit < 1 {
		return nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", limit)
	}
	out, err := collect(ctx, s.db, `SELECT `+requestColumns+`, `+sinceEpoch("rejected_at")+`, reason
FROM timer_request_errors WHERE seq > ? ORDER BY seq LIMIT ?`, []any{after, limit}, func(rows *sql.Rows) (hourglass.RejectedTimerRequest, error) {
		var (
			rejectedUs sql.NullInt64
			reason     string
		)
		r, err := scanRequest(rows, &rejectedUs, &reason)
		return hourglass.RejectedTimerRequest{TimerRequest: r.TimerRequest, RejectedAt: time.UnixMicro(rejectedUs.Int64).UTC(), Reason: reason}, err
	})
	return out, fail("rejected timer requests", err)
}

// RejectedTimerRequestCount implements hourglass.TimerRequestStore.
// Errors: unavailable.
func (s *Store) RejectedTimerRequestCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM timer_request_errors`).Scan(&n)
	return n, fail("count rejected timer requests", err)
}

// PruneRejectedTimerRequests implements hourglass.TimerRequestStore.
// Errors: unavailable.
func (s *Store) PruneRejectedTimerRequests(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM timer_request_errors WHERE rejected_at < ? ORDER BY seq LIMIT ?`, before.UTC(), limit)
	if err != nil {
		return 0, fail("prune rejected timer requests", err)
	}
	n, err := res.RowsAffected()
	return int(n), fail("prune rejected timer requests", err)
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
