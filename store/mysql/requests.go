package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// Timer requests (hourglass.TimerRequestStore): rows a shop's transactions
// INSERT into timer_requests (migration 0009), from the shop's own database
// by qualified name (an InnoDB transaction spans the databases of one
// server), applied in a transaction of their own by sqlq
// (ApplyTimerRequestsIn: the steps; FOR UPDATE SKIP LOCKED, so that
// appliers on several nodes take disjoint batches and none waits on
// another). MySQL's own are the writes: one group commit batch
// (writeRequests), decided on the server's clock.
//
// A deadlock, a lock wait timeout, a racing creation of the same key (a
// duplicate key) or, on Galera, a lost certification (two nodes' appliers
// took the same rows: SKIP LOCKED sees a node's own locks only) rolls it all
// back and runs it again (retryPolicy): a request is applied exactly once,
// whichever process dies when. Under REPEATABLE READ (a server logging
// binlog_format=STATEMENT, see connect) taking the batch also locks the gap
// after its last row: a shop's INSERT then waits for the applier's commit,
// a few milliseconds, and is never refused.
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

// TimerRequestsWritten implements hourglass.TimerRequestStore: nil, since
// MySQL cannot say when requests were committed; the applier polls.
func (s *Store) TimerRequestsWritten() <-chan struct{} { return nil }

// ApplyTimerRequests implements hourglass.TimerRequestStore, in one
// transaction, run again after a lost race (retryPolicy).
// It takes at most Config.MaxBatch requests whatever p.Limit says, so that
// its statements stay well under max_allowed_packet, as a group commit's
// do (Full then says more may be waiting). It is safe for concurrent use,
// by any number of store values and processes. Errors: invalid_argument (a
// limit under 1), unavailable (the outcome of the commit may then be
// unknown: the requests it applied are gone, the others are still there
// for the next call).
func (s *Store) ApplyTimerRequests(ctx context.Context, p hourglass.TimerRequestsParams) (hourglass.TimerRequestsApplied, error) {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	clock := cmp.Or[hourglass.Clock](s.clock, hourglass.SystemClock{})
	// Decided on the server's now (or the test's), as the group commit decides.
	p.Limit = min(p.Limit, cmp.Or(s.cfg.MaxBatch, MaxBatchDefault))
	res, err := s.Store.ApplyTimerRequests(ctx, p, clock, true, s.writeRequests)
	if err == nil {
		// This node's engine hears of them through the store's due feed
		// (the others through the order_feed row the batch wrote).
		s.w.Announce(hourglass.DueUpdate{Due: res.Armed, Gone: res.Cancelled})
	}
	return res, err
}

// writeRequests is sqlq.TimerRequestWrites: the requests that run, as one
// batch of ArmTimer's and CancelTimer's ops (batch.RunRequests: the same
// locks, decisions and statements) inside the requests' transaction: the
// rounds PostgreSQL needs are one batch here.
func (s *Store) writeRequests(ctx context.Context, x sqlq.Querier, _ time.Time, p plan.TimerRequests) (func(), error) {
	out, err := batch.RunRequests(ctx, s.batchConfig(), &txn{s: s, tx: x.(sqlQuerier).q.(*sql.Tx)}, p)
	if err != nil || !out.Deferred {
		return nil, err
	}
	return s.fanOut.Wake, nil
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
