package mysql

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
)

// RecordAttempt implements hourglass.DeliveryStore: a compare-and-set on
// (state 'pending', attempts); false when another attempt was recorded
// first or the delivery is gone. Attempts are group-committed by the
// writers in their low lane (store/internal/batch): a delivery backlog's
// bookkeeping shares transactions instead of committing once per attempt,
// and takes only the room that closes and API writes leave.
func (s *Store) RecordAttempt(ctx context.Context, r hourglass.AttemptResult) (hourglass.AttemptRecord, error) {
	res := s.submit(ctx, &batch.Op{Kind: batch.Attempt, Attempt: r})
	return res.Record, res.Err
}
