package sqlq

import "context"

// FanoutPending returns the number of rows of fanout_pending: close batches
// of a burst whose webhook deliveries are not created yet (a row is one
// batch). It counts the table, which the fan-out loop keeps near empty
// outside a burst. Errors: unavailable. Safe for concurrent use.
func (s *Store) FanoutPending(ctx context.Context) (int, error) {
	var n int
	err := s.read(ctx, "count deferred fan-outs", func(x q) error {
		_, err := x.row(ctx, `SELECT count(*) FROM fanout_pending`, nil, &n)
		return err
	})
	return n, err
}
