package sqlite

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/writer"
	"time"
	"zombiezen.com/go/sqlite"
)

// ApplyBulk implements hourglass.BulkStore: one op of the writer whose run
// is batch.RunBulk in the writer's transaction; what it changed in what is
// due is announced after the commit, and the deliveries its events created
// wake the delivery engine.
func (s *Store) ApplyBulk(ctx context.Context, items []hourglass.BulkItem, p *hourglass.BulkProgress) ([]hourglass.BulkItemResult, error) {
	if err := batch.CheckBulk(items); err != nil {
		return nil, err
	}
	var (
		b   batch.Bulk
		out batch.Outcome
	)
	w := &op{due: b.Due}
	w.run = func(conn *sqlite.Conn, _ time.Time) error {
		var err error
		out, err = batch.RunBulk(ctx, s.batchConfig(), &txn{s: s, conn: conn}, s.Store, connQuerier{conn}, items, p, &b)
		return wrap("apply bulk", err)
	}
	if err := s.w.Submit(ctx, writer.Normal, w); err != nil {
		return nil, err
	}
	b.Committed(out, nil, s.w.NotifyDeliveries, s.fanOut.Wake) // the writer announced b.Due
	return b.Results, nil
}

var _ hourglass.BulkStore = (*Store)(nil)
