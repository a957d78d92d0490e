package sqlq

import (
	"context"
	"time"
)

// Rejected timer requests (hourglass.TimerRequestStore) outside their
// listing, whose time columns each store stores in its own way.

// RejectedTimerRequestCount implements hourglass.TimerRequestStore.
// Errors: unavailable.
func (s *Store) RejectedTimerRequestCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.read(ctx, "count rejected timer requests", func(x q) error {
		_, err := x.row(ctx, `SELECT count(*) FROM timer_request_errors`, nil, &n)
		return err
	})
	return n, err
}

// PruneRejectedTimerRequests implements hourglass.TimerRequestStore: one
// DELETE of the oldest by seq, in its own transaction. before is bound as
// a time in UTC (SQLite's adapter binds it as the unix ms its rejected_at
// holds). Errors: unavailable.
func (s *Store) PruneRejectedTimerRequests(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	query := s.deleteSome("timer_request_errors", "seq", "", `rejected_at < ?`, "seq")
	err := s.write(ctx, "prune rejected timer requests", Normal, func(x q) error {
		var err error
		n, err = x.exec(ctx, query, before.UTC(), limit)
		return err
	})
	return int(n), err
}
