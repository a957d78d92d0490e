package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
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

// scanRequest reads requestColumns, followed by extra destinations.
func scanRequest(sc scanner, extra ...any) (plan.RequestRow, error) {
	var (
		r              plan.RequestRow
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
			r.Unreadable = badTime("fire_at")
		}
		r.FireAt = &at
	}
	if reqUs.Valid {
		r.RequestedAt = time.UnixMicro(reqUs.Int64).UTC()
	} else {
		r.Unreadable = badTime("requested_at")
	}
	return r, nil
}

// badTime is the reason a request whose DATETIME column holds no time is
// rejected with.
func badTime(column string) string { return column + ": not a valid time (a zero date)" }

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
	err := s.retry(ctx, func() error {
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
	reqs, err := collect(ctx, tx, lockRequestsSQL, []any{limit}, func(rows *sql.Rows) (plan.RequestRow, error) { return scanRequest(rows) })
	if err != nil {
		return res, fmt.Errorf("lock timer requests: %w", err)
	}
	if len(reqs) == 0 {
		return res, nil
	}
	full := len(reqs) == limit
	// 2. The keys to hold back.
	held, err := heldKeys(ctx, tx, reqs)
	if err != nil {
		return res, fmt.Errorf("read held timer requests: %w", err)
	}
	// 3. Decided on now (the server's clock, or the test's), then run as a
	// batch of ArmTimer's and CancelTimer's ops, in seq order.
	nowMs, err := s.now(ctx, tx)
	if err != nil {
		return res, fmt.Errorf("read now: %w", err)
	}
	clock := cmp.Or[hourglass.Clock](s.clock, hourglass.SystemClock{})
	read := clock.Now()
	now := hourglass.FromUnixMilli(nowMs)
	p := plan.PlanTimerRequests(reqs, held, now)
	var (
		ops []*op
		ran []*plan.TimerRequest // the request of each op
	)
	for _, r := range p {
		switch {
		case !r.Runs():
			continue
		case r.Arm != nil:
			ops = append(ops, &op{kind: opArm, arm: *r.Arm})
		default:
			ops = append(ops, &op{kind: opCancel, key: r.CancelKey})
		}
		ran = append(ran, r)
	}
	b := &batch{s: s, ops: ops, results: make([]opResult, len(ops)), timers: &batchTimers{}, tx: tx}
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
		b.answer()
	}
	for i, r := range ran {
		if err := r.Settle(b.results[i].timer, b.results[i].err); err != nil {
			return res, err
		}
	}
	// 4. The rejected ones, as the shop wrote them, with their reasons.
	done, rejected := p.Outcome()
	if len(rejected) > 0 {
		args := make([]any, 0, 1+3*len(rejected))
		args = append(args, now)
		for _, r := range rejected {
			args = append(args, r.Row.Seq)
		}
		for _, r := range rejected {
			args = append(args, r.Reason)
		}
		for _, r := range rejected {
			args = append(args, r.Row.Seq)
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
		return hourglass.TimerRequestsApplied{Full: full}, nil // every key held back: nothing to write
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
	// The lags count from the server's now, plus the time since it was read.
	res = p.Result(now.Add(max(clock.Now().Sub(read), 0)))
	res.Full = full
	// This node's engine hears of them through the store's due feed (the
	// others through the order_feed row b.write wrote).
	s.w.Announce(hourglass.DueUpdate{Due: res.Armed, Gone: res.Cancelled})
	return res, nil
}

// heldKeys returns the keys of reqs with an earlier request reqs does not
// hold.
func heldKeys(ctx context.Context, tx *sql.Tx, reqs []plan.RequestRow) (map[string]bool, error) {
	held := map[string]bool{}
	keys := plan.HeldKeysToRead(reqs)
	if len(keys) == 0 {
		return held, nil
	}
	seqs := make([]any, len(reqs))
	for i, r := range reqs {
		seqs[i] = r.Seq
	}
	args := append(append([]any{reqs[len(reqs)-1].Seq}, seqs...), anys(keys)...)
	err := eachRow(ctx, tx, fmt.Sprintf(heldKeysSQL, placeholders(len(seqs)), placeholders(len(keys))), args, func(rows *sql.Rows) error {
		var k string
		err := rows.Scan(&k)
		held[k] = true // compared with the batch's keys exactly, in the plan
		return err
	})
	return held, err
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
