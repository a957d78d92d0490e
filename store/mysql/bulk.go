package mysql

import (
	"context"

	"database/sql"
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// ApplyBulk implements hourglass.BulkStore: batch.RunBulk in a
// transaction of its own (as the timer requests' apply), run again after a
// lost race; what it changed in what is due is announced after the commit
// (to the other processes by the batch's own announcement).
func (s *Store) ApplyBulk(ctx context.Context, items []hourglass.BulkItem, p *hourglass.BulkProgress) ([]hourglass.BulkItemResult, error) {
	if err := batch.CheckBulk(items); err != nil {
		return nil, err
	}
	var (
		b   batch.Bulk
		out batch.Outcome
	)
	err := s.Store.DB().Write(ctx, "apply bulk", sqlq.Normal, func(x sqlq.Querier) error {
		var err error
		out, err = batch.RunBulk(ctx, s.batchConfig(), &txn{s: s, tx: x.(sqlQuerier).q.(*sql.Tx)}, s.Store, x, items, p, &b)
		return err
	})
	if err != nil {
		return nil, err
	}
	b.Committed(out, s.w.Announce, s.w.NotifyDeliveries, s.fanOut.Wake)
	return b.Results, nil
}

var _ hourglass.BulkStore = (*Store)(nil)
