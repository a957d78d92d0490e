package webhook

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// rowStore serves PendingDeliveries from rows, records each read's ids,
// and, when hold is set, blocks each read, once it has its rows, until
// the test lets it return.
type rowStore struct {
	Store // nil: only PendingDeliveries is called
	mu    sync.Mutex
	rows  map[int64]hourglass.PendingDelivery
	reads [][]int64
	hold  chan struct{} // a read sends on it when it starts, then waits for it
	fail  bool          // reads fail (the database is down)
}

func (s *rowStore) PendingDeliveries(_ context.Context, ids []int64) ([]hourglass.PendingDelivery, error) {
	s.mu.Lock()
	s.reads = append(s.reads, slices.Clone(ids))
	if s.fail {
		s.mu.Unlock()
		return nil, errors.New("rowStore: the database is down")
	}
	var ds []hourglass.PendingDelivery
	for _, id := range ids {
		if d, ok := s.rows[id]; ok {
			ds = append(ds, d)
		}
	}
	s.mu.Unlock()
	if s.hold != nil { // the rows as they were when the read began
		s.hold <- struct{}{}
		<-s.hold
	}
	return ds, nil
}

func (s *rowStore) set(d hourglass.PendingDelivery) {
	s.mu.Lock()
	s.rows[d.ID] = d
	s.mu.Unlock()
}

func (s *rowStore) readLog() [][]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reads)
}

// readerRig runs a reader over a rowStore holding deliveries 1-9 (8 waits
// for 7), with a fake clock and a queue whose upcoming ids the test sets.
type readerRig struct {
	store *rowStore
	clock *hourglasstest.Clock
	r     *reader
	mu    sync.Mutex
	queue []int64
}

func newReaderRig(t *testing.T) *readerRig {
	t.Helper()
	g := &readerRig{store: &rowStore{rows: map[int64]hourglass.PendingDelivery{}}, clock: hourglasstest.NewClock(time.UnixMilli(1_000_000))}
	for id := int64(1); id <= 9; id++ {
		g.store.set(hourglass.PendingDelivery{ID: id, OrderID: id})
	}
	g.store.set(hourglass.PendingDelivery{ID: 8, OrderID: 7, BlockedBy: hourglass.DeliveryTimer{ID: 7}})
	g.r = newReader(g.store, g.clock, 4, func(ids []int64, n int) []int64 {
		g.mu.Lock()
		defer g.mu.Unlock()
		return append(ids, g.queue[:min(n, len(g.queue))]...)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.r.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

func (g *readerRig) upcoming(ids ...int64) {
	g.mu.Lock()
	g.queue = ids
	g.mu.Unlock()
}

// get reads id and checks that it is found with the attempts wanted.
func (g *readerRig) get(t *testing.T, id int64, attempts int) {
	t.Helper()
	d, err := g.r.get(t.Context(), id)
	if err != nil || d.ID != id || d.Attempts != attempts {
		t.Fatalf("get(%d) = id %d, %d attempts, %v; want id %d, %d attempts", id, d.ID, d.Attempts, err, id, attempts)
	}
}

// failedGet asks for delivery id while the store's reads fail, and wants
// the error.
func (g *readerRig) failedGet(t *testing.T, id int64) {
	t.Helper()
	g.store.mu.Lock()
	g.store.fail = true
	g.store.mu.Unlock()
	if _, err := g.r.get(t.Context(), id); err == nil {
		t.Fatalf("get(%d) while reads fail: no error", id)
	}
	g.store.mu.Lock()
	g.store.fail = false
	g.store.mu.Unlock()
}

func (g *readerRig) wantReads(t *testing.T, want ...[]int64) {
	t.Helper()
	if got := g.store.readLog(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("reads %v, want %v", got, want)
	}
}

// TestReadAhead: a read takes the deliveries next in the queue with the
// one asked for, each once, and their attempts take those rows without
// reading, once each; a row that waits for an earlier delivery is not
// kept.
func TestReadAhead(t *testing.T) {
	g := newReaderRig(t)
	g.upcoming(1, 2, 3, 2, 8) // 1: its own timer again; 2: twice
	g.get(t, 1, 0)
	g.upcoming()
	g.get(t, 2, 0)
	g.get(t, 3, 0)
	g.wantReads(t, []int64{1, 2, 3, 8})
	g.get(t, 8, 0) // blocked when read ahead: read again at its turn
	g.get(t, 2, 0) // a second attempt of 2 reads again
	g.wantReads(t, []int64{1, 2, 3, 8}, []int64{8}, []int64{2})
	if _, err := g.r.get(t.Context(), 42); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("get of a delivery that is not pending: %v, want not_found", err)
	}
}

// TestReadAheadServesWaitingAsks: an attempt that asks for its row while
// the read bringing it ahead is in flight takes that row when the read
// returns, instead of reading it again; a second ask of the same delivery
// gets the same row.
func TestReadAheadServesWaitingAsks(t *testing.T) {
	g := newReaderRig(t)
	g.store.hold = make(chan struct{})
	g.upcoming(2, 3)
	first := make(chan error, 1)
	go func() { _, err := g.r.get(context.Background(), 1); first <- err }()
	<-g.store.hold // the read of 1, 2 and 3 has begun
	g.upcoming()
	waiting := make(chan hourglass.PendingDelivery, 2)
	for range 2 {
		go func() {
			d, err := g.r.get(context.Background(), 2)
			if err != nil {
				t.Error(err)
			}
			waiting <- d
		}()
	}
	testenv.Eventually(t, 10*time.Second, "two asks for delivery 2 queued behind the read", func() bool { return len(g.r.reqs) == 2 })
	g.store.hold <- struct{}{}
	// Any later read passes its hold at once.
	go func() {
		for {
			select {
			case <-g.store.hold:
				g.store.hold <- struct{}{}
			case <-t.Context().Done():
				return
			}
		}
	}()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d := <-waiting; d.ID != 2 {
			t.Fatalf("a waiting ask got delivery %d, want 2", d.ID)
		}
	}
	g.get(t, 3, 0)
	g.wantReads(t, []int64{1, 2, 3})
}

// TestReadAheadSkipsGone: a delivery a read found no longer pending (its
// timer queued twice: a scan offered it again just before its attempt
// finished) is not read ahead again while young; an attempt of it still
// reads it; an API change forgets what was gone.
func TestReadAheadSkipsGone(t *testing.T) {
	g := newReaderRig(t)
	g.upcoming(42, 2)
	g.get(t, 1, 0) // reads 1, 42 (not pending) and 2
	g.upcoming(42, 3)
	g.get(t, 4, 0) // 42 is gone: not read ahead again
	if _, err := g.r.get(t.Context(), 42); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("get(42): %v, want not_found", err)
	}
	g.clock.Advance(aheadMaxAge + time.Millisecond)
	g.get(t, 5, 0) // older than aheadMaxAge: read ahead again (3 is still held)
	g.r.dropAll()
	g.upcoming(42)
	g.get(t, 6, 0)
	g.wantReads(t, []int64{1, 42, 2}, []int64{4, 3}, []int64{42}, []int64{5, 42}, []int64{6, 42})
}

// TestGoneBounded: the deliveries noted gone stay bounded however many
// reads find their rows gone (a burst's queue of stale timers), and a note
// older than aheadMaxAge goes once the list is long.
func TestGoneBounded(t *testing.T) {
	g := newReaderRig(t)
	start := g.clock.Now()
	g.r.gone[-1] = start.Add(-2 * aheadMaxAge) // an old note
	next := int64(1000)
	for range 20 {
		asked := map[int64]bool{}
		for range hourglass.MaxPendingBatch {
			asked[next] = false // read ahead, and found gone
			next++
		}
		g.r.keep(nil, asked, start)
		if n := len(g.r.gone); n > 4*maxAhead {
			t.Fatalf("%d deliveries noted gone after %d found gone; want at most %d", n, next-1000, 4*maxAhead)
		}
	}
	if _, ok := g.r.gone[-1]; ok {
		t.Error("a note older than aheadMaxAge was kept in a long list")
	}
}

// TestReadAheadAges: a row read ahead longer than aheadMaxAge ago is read
// again.
func TestReadAheadAges(t *testing.T) {
	g := newReaderRig(t)
	g.upcoming(2)
	g.get(t, 1, 0)
	g.store.set(hourglass.PendingDelivery{ID: 2, OrderID: 2, Attempts: 1}) // another node's attempt
	g.clock.Advance(aheadMaxAge + time.Millisecond)
	g.upcoming()
	g.get(t, 2, 1)
	g.wantReads(t, []int64{1, 2}, []int64{2})
}

// TestReadAheadDropped: an attempt that finishes (drop), or an API change
// (dropAll), before or while a row is read ahead makes its attempt read
// again: it never sends on a row older than its delivery's last outcome.
func TestReadAheadDropped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(r *reader)
	}{
		{"attempt finished", func(r *reader) { r.drop(2) }},
		{"API change", func(r *reader) { r.dropAll() }},
	} {
		t.Run(tc.name+" before", func(t *testing.T) {
			g := newReaderRig(t)
			g.upcoming(2)
			g.get(t, 1, 0)
			g.store.set(hourglass.PendingDelivery{ID: 2, OrderID: 2, Attempts: 1})
			tc.change(g.r)
			g.upcoming()
			g.get(t, 2, 1)
		})
		t.Run(tc.name+" while read", func(t *testing.T) {
			g := newReaderRig(t)
			g.store.hold = make(chan struct{})
			g.upcoming(2)
			got := make(chan error, 1)
			go func() { _, err := g.r.get(context.Background(), 1); got <- err }()
			<-g.store.hold // the read of 1 and 2 has begun
			g.store.set(hourglass.PendingDelivery{ID: 2, OrderID: 2, Attempts: 1})
			tc.change(g.r)
			g.store.hold <- struct{}{} // it returns 2 as it was when it began
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			g.upcoming()
			go func() { <-g.store.hold; g.store.hold <- struct{}{} }()
			g.get(t, 2, 1)
		})
	}
}

// TestReadAheadFailedRead: a read that fails answers its askers with the
// error and keeps nothing read ahead: the next attempts read again.
func TestReadAheadFailedRead(t *testing.T) {
	g := newReaderRig(t)
	g.upcoming(2)
	g.failedGet(t, 1)
	g.upcoming()
	g.get(t, 2, 0)
	g.wantReads(t, []int64{1, 2}, []int64{2})
}

// TestFailedReadNotesNothingGone: a read that fails found nothing gone,
// so the deliveries it asked for are read ahead again at the next read.
func TestFailedReadNotesNothingGone(t *testing.T) {
	g := newReaderRig(t)
	g.upcoming(2)
	g.failedGet(t, 1)
	g.get(t, 3, 0)
	g.wantReads(t, []int64{1, 2}, []int64{3, 2})
}

// apiStore is a rowStore whose webhook can be deleted and whose dead
// letter can be retried.
type apiStore struct{ *rowStore }

func (apiStore) DeleteWebhook(_ context.Context, id int64) (hourglass.Webhook, error) {
	return hourglass.Webhook{ID: id}, nil
}

func (apiStore) RetryDeadLetter(_ context.Context, id int64) (hourglass.DeliveryTimer, error) {
	return hourglass.DeliveryTimer{ID: id, At: time.Now().Add(time.Hour)}, nil
}

// TestServiceDropsReadAhead: the service drops the rows read ahead where
// they may have gone stale: a finished attempt its own delivery's, a
// deleted webhook or a retried dead letter every one.
func TestServiceDropsReadAhead(t *testing.T) {
	s, err := New(apiStore{&rowStore{rows: map[int64]hourglass.PendingDelivery{}}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	fill := func() {
		s.reads.mu.Lock()
		for _, id := range []int64{7, 8} {
			s.reads.ahead[id] = aheadRow{d: hourglass.PendingDelivery{ID: id}, at: time.Now()}
		}
		s.reads.mu.Unlock()
	}
	left := func() []int64 {
		s.reads.mu.Lock()
		defer s.reads.mu.Unlock()
		ids := slices.Collect(maps.Keys(s.reads.ahead))
		slices.Sort(ids)
		return ids
	}
	fill()
	s.finish(t.Context(), 7, hourglass.DeliveryTimer{}, false)
	if got := left(); !slices.Equal(got, []int64{8}) {
		t.Errorf("after delivery 7's attempt finished: read ahead %v, want [8]", got)
	}
	fill()
	if _, err := s.DeleteWebhook(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if got := left(); len(got) != 0 {
		t.Errorf("after a webhook was deleted: read ahead %v, want none", got)
	}
	fill()
	if err := s.RetryDeadLetter(t.Context(), 9); err != nil {
		t.Fatal(err)
	}
	if got := left(); len(got) != 0 {
		t.Errorf("after a dead letter was retried: read ahead %v, want none", got)
	}
}
