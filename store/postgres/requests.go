package postgres

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/hex"

	"github.com/hourglass/hourglass"
)

// Timer requests (hourglass.TimerRequestStore): rows a shop's transactions
// INSERT into timer_requests (migration 0007), applied in a transaction of
// their own by sqlq (ApplyTimerRequestsIn: FOR UPDATE SKIP LOCKED, so that
// appliers on several nodes take disjoint batches, and each key's requests
// in seq order): a request is applied exactly once, whichever process dies
// when. PostgreSQL's own is the wake-up (the trigger's NOTIFY); the writes
// are one group commit batch of ArmTimer's and CancelTimer's ops
// (writeRequests, batch.go).

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

// wakeRequests fires TimerRequestsWritten without blocking.
func (s *Store) wakeRequests() {
	select {
	case s.requestsWritten <- struct{}{}:
	default:
	}
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
