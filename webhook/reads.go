package webhook

import (
	"context"

	"github.com/hourglass/hourglass"
)

// reader coalesces the attempts' reads of their deliveries: each attempt
// re-reads its row before sending (see Service.attempt), and the reads the
// workers ask for while one is in flight are made together, in one
// DeliveryStore.PendingDeliveries, when it returns. A lone attempt waits
// for nothing; a burst's attempts share a read (and, on SQLite, a read
// transaction and a warm page cache) among up to MaxPendingBatch of them.
type reader struct {
	store Store
	reqs  chan readReq
}

type readReq struct {
	id    int64
	reply chan<- readReply // buffered: the loop never waits for the asker
}

type readReply struct {
	d   hourglass.PendingDelivery
	err error
}

func newReader(store Store, workers int) *reader {
	return &reader{store: store, reqs: make(chan readReq, workers)}
}

// get returns delivery id as PendingDelivery would: not_found when it is no
// longer pending. It fails with ctx's error once ctx ends, or once the
// loop (run) has stopped.
func (r *reader) get(ctx context.Context, id int64) (hourglass.PendingDelivery, error) {
	reply := make(chan readReply, 1)
	select {
	case r.reqs <- readReq{id: id, reply: reply}:
	case <-ctx.Done():
		return hourglass.PendingDelivery{}, ctx.Err()
	}
	select {
	case rep := <-reply:
		return rep.d, rep.err
	case <-ctx.Done():
		return hourglass.PendingDelivery{}, ctx.Err()
	}
}

// run answers reads until ctx ends: it takes the first read asked for,
// then every other one already waiting (up to MaxPendingBatch), and reads
// them all at once.
func (r *reader) run(ctx context.Context) {
	batch := make([]readReq, 0, hourglass.MaxPendingBatch)
	ids := make([]int64, 0, hourglass.MaxPendingBatch)
	for {
		batch, ids = batch[:0], ids[:0]
		select {
		case <-ctx.Done():
			return
		case q := <-r.reqs:
			batch = append(batch, q)
		}
	more:
		for len(batch) < hourglass.MaxPendingBatch {
			select {
			case q := <-r.reqs:
				batch = append(batch, q)
			default:
				break more
			}
		}
		seen := make(map[int64]bool, len(batch))
		for _, q := range batch {
			if !seen[q.id] {
				seen[q.id] = true
				ids = append(ids, q.id)
			}
		}
		ds, err := r.store.PendingDeliveries(ctx, ids)
		found := make(map[int64]hourglass.PendingDelivery, len(ds))
		for _, d := range ds {
			found[d.ID] = d
		}
		for _, q := range batch {
			rep := readReply{err: err}
			if err == nil {
				d, ok := found[q.id]
				rep.d = d
				if !ok {
					rep.err = hourglass.PendingNotFound(q.id)
				}
			}
			q.reply <- rep
		}
	}
}
