package postgres

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// Timer requests (hourglass.TimerRequestStore): rows a shop's transactions
// INSERT into timer_requests (migration 0007), applied in a transaction of
// their own by sqlq (ApplyTimerRequestsIn: FOR UPDATE SKIP LOCKED, so that
// appliers on several nodes take disjoint batches, and each key's requests
// in seq order): a request is applied exactly once, whichever process dies
// when. PostgreSQL's own are the wake-up (the trigger's NOTIFY) and the
// writes, in rounds of the statements ArmTimer and CancelTimer use.

// requestsChannel is the NOTIFY channel of timer_requests' trigger for a
// database and schema (migration 0007 computes the same name).
func requestsChannel(db, schema string) string {
	sum := md5.Sum([]byte(db + "." + schema))
	return "hourglass_timer_requests_" + hex.EncodeToString(sum[:])
}

// TimerRequestsWritten implements hourglass.TimerRequestStore: it fires
// after a transaction that wrote requests committed, on this database and
// schema (the trigger's NOTIFY), and after the listener reconnects.
func (s *Store) TimerRequestsWritten() <-chan struct{} { return s.requestsWritten }

// ApplyTimerRequests implements hourglass.TimerRequestStore
// (sqlq.Store.ApplyTimerRequestsIn: the steps), in one transaction, run
// again after a deadlock or serialization failure, deciding the requests
// at the database's now (the test clock's, when set), which is also what
// requested_at holds. What it arms and cancels is announced like
// ArmTimer's and CancelTimer's: to this store's due feed after the commit,
// and to the other processes at the commit. Errors: invalid_argument (a
// Limit under 1), unavailable.
func (s *Store) ApplyTimerRequests(ctx context.Context, p hourglass.TimerRequestsParams) (hourglass.TimerRequestsApplied, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	clock := cmp.Or[hourglass.Clock](s.cfg.Clock, hourglass.SystemClock{})
	res, err := s.Store.ApplyTimerRequests(ctx, p, clock, true, s.writeRequests)
	if err == nil {
		s.w.Announce(hourglass.DueUpdate{Due: res.Armed, Gone: res.Cancelled})
	}
	return res, err
}

// writeRequests is sqlq.TimerRequestWrites: the requests in rounds (the
// first request of each key, then the second of a key with two, ...), each
// round one pgx.Batch of the statements ArmTimer and CancelTimer use
// (timerWrites), and the timers armed announced to the other processes at
// the commit.
func (s *Store) writeRequests(ctx context.Context, x sqlq.Querier, _ time.Time, p plan.TimerRequests) (func(), error) {
	tx := x.(pgQuerier).q.(pgx.Tx)
	var armed []*op            // the arms that changed their timer, to announce
	ops := make([]*op, len(p)) // each running request's, by its place in p
	// The timers earlier rounds armed: a key armed twice alike in one
	// batch is left unchanged by its second arm, which must find the
	// first's timer (armedReadSQL does not read the transaction's own rows).
	latest := map[string]hourglass.Timer{}
	for round := range p.Rounds() {
		tw := &timerWrites{latest: latest}
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
			return nil, err
		}
		for i, r := range p {
			if r.Round != round || ops[i] == nil {
				continue
			}
			if err := r.Settle(ops[i].timer, ops[i].err); err != nil {
				return nil, err
			}
		}
		armed = append(armed, tw.armed...)
	}
	// The other nodes hear of the timers armed at the commit, on the
	// created-orders channel, as of ArmTimer's (writer.go); this node's
	// engine through the store's due feed.
	if payloads := s.createdPayloads(nil, armed, nil); len(payloads) > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, s.createdChannel, payloads); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// wakeRequests fires TimerRequestsWritten without blocking.
func (s *Store) wakeRequests() {
	select {
	case s.requestsWritten <- struct{}{}:
	default:
	}
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
