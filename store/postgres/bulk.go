package postgres

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/jackc/pgx/v5"
)

// ApplyBulk implements hourglass.BulkStore: batch.RunBulk in a
// transaction of its own (as the timer requests' apply), run again after a
// lost race; what it changed in what is due is announced after the commit
// (to the other processes by the batch's own announcement).
func (s *Store) ApplyBulk(ctx context.Context, items []hourglass.BulkItem, p *hourglass.BulkProgress) ([]hourglass.BulkItemResult, error) {
	if err := batch.CheckBulk(items); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	var (
		b   batch.Bulk
		out batch.Outcome
	)
	err := s.Store.DB().Write(ctx, "apply bulk", sqlq.Normal, func(x sqlq.Querier) error {
		t := &txn{s: s, q: x.(pgQuerier).q.(pgx.Tx)}
		var err error
		if out, err = batch.RunBulk(ctx, s.batchConfig(), t, s.Store, x, items, p, &b); err != nil {
			return err
		}
		return t.flush(ctx)
	})
	if err != nil {
		return nil, err
	}
	b.Committed(out, s.w.Announce, s.w.NotifyDeliveries, s.fanOut.Wake)
	return b.Results, nil
}

var _ hourglass.BulkStore = (*Store)(nil)
