package webhook

import (
	"context"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// reader coalesces the attempts' reads of their deliveries: each attempt
// re-reads its row before sending (see Service.attempt), and the reads the
// workers ask for while one is in flight are made together, in one
// DeliveryStore.PendingDeliveries, when it returns. A lone attempt waits
// for nothing; a burst's attempts share a read (and, on SQLite, a read
// transaction and a warm page cache) among up to MaxPendingBatch of them.
//
// In a backlog it also reads ahead: the read takes, besides the rows asked
// for, those of the deliveries next in the dispatcher's queue (upcoming),
// up to MaxPendingBatch in all, and keeps them (ahead) for their attempts.
// An attempt takes a row read ahead only while it is young (aheadMaxAge,
// counted from before its read began) and only once; a row read ahead is
// dropped when an attempt of its delivery finishes (drop), including one
// that finishes while the read is in flight, and when the API changes
// deliveries (dropAll), so an attempt never sends on a row older than its
// own delivery's last outcome. A row that waits for an earlier delivery
// (BlockedBy) is not kept: it is read again when its turn comes. An attempt
// that asked while the read bringing its row ahead was in flight takes the
// row when that read returns (serveAhead), and a delivery a read found no
// longer pending is not read ahead again while young (gone): in a burst the
// queue holds many such stale timers, and reading each one ahead at every
// read made MariaDB read four times the rows it needed.
type reader struct {
	store Store
	clock hourglass.Clock
	reqs  chan readReq
	// upcoming appends the ids of up to n deliveries waiting for a
	// worker, in the order they will be taken (nil: no read-ahead).
	upcoming func(ids []int64, n int) []int64

	mu      sync.Mutex
	ahead   map[int64]aheadRow
	reading bool           // a read is in flight
	dropped map[int64]bool // attempts finished while it is
	stale   bool           // the API changed deliveries while it is
	// gone holds the deliveries a read found no longer pending, with when
	// that read began: their timers still queued (a scan that found one
	// pending just before its attempt finished queues it again) are not
	// read ahead while young. An attempt of one still reads it: only a
	// read answers not_found.
	gone map[int64]time.Time
}

type aheadRow struct {
	d  hourglass.PendingDelivery
	at time.Time // when its read began
}

// aheadMaxAge bounds how old a row read ahead may be when an attempt takes
// it: in a backlog the next deliveries in the queue are taken within
// milliseconds; a row older than this is read again.
const aheadMaxAge = 500 * time.Millisecond

type readReq struct {
	id    int64
	reply chan<- readReply // buffered: the loop never waits for the asker
}

type readReply struct {
	d   hourglass.PendingDelivery
	err error
}

func newReader(store Store, clock hourglass.Clock, workers int, upcoming func([]int64, int) []int64) *reader {
	return &reader{store: store, clock: clock, reqs: make(chan readReq, workers), upcoming: upcoming,
		ahead: map[int64]aheadRow{}, dropped: map[int64]bool{}, gone: map[int64]time.Time{}}
}

// get returns delivery id as PendingDelivery would: not_found when it is no
// longer pending. It fails with ctx's error once ctx ends, or once the
// loop (run) has stopped.
func (r *reader) get(ctx context.Context, id int64) (hourglass.PendingDelivery, error) {
	if d, ok := r.take(id); ok {
		return d, nil
	}
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

// take removes id's row read ahead and returns it if it is young enough.
func (r *reader) take(id int64) (hourglass.PendingDelivery, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.ahead[id]
	if !ok {
		return hourglass.PendingDelivery{}, false
	}
	delete(r.ahead, id)
	return a.d, r.clock.Now().Sub(a.at) <= aheadMaxAge
}

// drop forgets id's row read ahead, and the one a read in flight brings:
// an attempt of id finished, so the row may be older than its outcome.
func (r *reader) drop(id int64) {
	r.mu.Lock()
	delete(r.ahead, id)
	if r.reading {
		r.dropped[id] = true
	}
	r.mu.Unlock()
}

// dropAll forgets every row read ahead, and those a read in flight brings.
func (r *reader) dropAll() {
	r.mu.Lock()
	clear(r.ahead)
	clear(r.gone) // a retried dead letter is pending again
	r.stale = r.reading
	r.mu.Unlock()
}

// run answers reads until ctx ends: it takes the first read asked for,
// then every other one already waiting (up to MaxPendingBatch), adds the
// deliveries next in the queue, and reads them all at once.
func (r *reader) run(ctx context.Context) {
	batch := make([]readReq, 0, hourglass.MaxPendingBatch)
	ids := make([]int64, 0, hourglass.MaxPendingBatch)
	var next []int64
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
		// An ask that waited while the read bringing its row was in flight
		// (its worker took the delivery from the queue before the row was
		// kept) takes that row now instead of reading it again.
		batch = r.serveAhead(batch)
		if len(batch) == 0 {
			continue
		}
		asked := make(map[int64]bool, len(batch))
		for _, q := range batch {
			if !asked[q.id] {
				asked[q.id] = true
				ids = append(ids, q.id)
			}
		}
		if r.upcoming != nil {
			next = r.upcoming(next[:0], hourglass.MaxPendingBatch-len(ids))
		}
		start := r.clock.Now()
		r.mu.Lock()
		room := maxAhead - len(r.ahead)
		for _, id := range next {
			_, held := r.ahead[id]
			_, listed := asked[id] // asked for, or already read ahead (a second timer)
			at, isGone := r.gone[id]
			isGone = isGone && start.Sub(at) <= aheadMaxAge
			if !held && !listed && !isGone && len(ids) < hourglass.MaxPendingBatch && room > 0 {
				asked[id] = false // read ahead, not asked for
				ids = append(ids, id)
				room--
			}
		}
		r.reading = true // keep ends it
		r.mu.Unlock()
		ds, err := r.store.PendingDeliveries(ctx, ids)
		found := make(map[int64]hourglass.PendingDelivery, len(ds))
		for _, d := range ds {
			found[d.ID] = d
		}
		if err != nil {
			asked = nil // a failed read found nothing gone
		}
		r.keep(found, asked, start)
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

// serveAhead answers the asks whose rows are read ahead (take's rules: once
// each, while young; a second ask of the same delivery gets the same row, as
// from one read) and returns the others, in place.
func (r *reader) serveAhead(batch []readReq) []readReq {
	var served map[int64]hourglass.PendingDelivery
	rest := batch[:0]
	for _, q := range batch {
		d, ok := served[q.id]
		if !ok {
			if d, ok = r.take(q.id); ok {
				if served == nil {
					served = map[int64]hourglass.PendingDelivery{}
				}
				served[q.id] = d
			}
		}
		if ok {
			q.reply <- readReply{d: d}
			continue
		}
		rest = append(rest, q)
	}
	return rest
}

// maxAhead bounds the rows read ahead and not yet taken.
const maxAhead = 2 * hourglass.MaxPendingBatch

// keep holds the rows read ahead (asked false) that no finished attempt
// or API change made stale while they were read, notes the deliveries the
// read (asked's keys: asked for and read ahead) did not find pending
// (found) as gone, and ends the read. A failed read passes asked nil.
func (r *reader) keep(found map[int64]hourglass.PendingDelivery, asked map[int64]bool, start time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stale {
		for id, a := range asked {
			d, ok := found[id]
			if !ok {
				r.gone[id] = start
				continue
			}
			delete(r.gone, id)
			if !a && !r.dropped[id] && d.BlockedBy.ID == 0 {
				r.ahead[id] = aheadRow{d: d, at: start}
			}
		}
	}
	if len(r.gone) > maxAhead {
		for id, at := range r.gone {
			if start.Sub(at) > aheadMaxAge {
				delete(r.gone, id)
			}
		}
		if len(r.gone) > 4*maxAhead { // bounded whatever the queue holds
			clear(r.gone)
		}
	}
	r.reading, r.stale = false, false
	clear(r.dropped)
	// Rows never taken (their delivery was taken by an attempt that read
	// it itself, or the node stopped owning it) age out here.
	if len(r.ahead) > maxAhead/2 {
		now := r.clock.Now()
		for id, a := range r.ahead {
			if now.Sub(a.at) > aheadMaxAge {
				delete(r.ahead, id)
			}
		}
	}
}
