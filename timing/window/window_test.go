package window_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/timing/window"
)

// table is a Source over items kept in memory, paged like the stores page
// (by (due, id), strictly after the cursor, in the partitions asked for).
type table struct {
	mu    sync.Mutex
	items []hourglass.DueItem
	fail  error // returned by the next query, then cleared
	calls int
}

func (tb *table) add(id int64, due time.Time) hourglass.DueItem {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	t := hourglass.DueItem{ID: id, At: due}
	tb.items = append(tb.items, t)
	return t
}

func (tb *table) due(_ context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.calls++
	if err := tb.fail; err != nil {
		tb.fail = nil
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, errors.New("limit must be positive")
	}
	sorted := slices.Clone(tb.items)
	slices.SortFunc(sorted, func(a, b hourglass.DueItem) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	var page []hourglass.DueItem
	for _, t := range sorted {
		after := t.At.After(p.After) || t.At.Equal(p.After) && t.ID > p.AfterID
		if !after || t.At.After(p.Until) || !p.Parts.Has(t.ID) {
			continue
		}
		if page = append(page, t); len(page) == p.Limit {
			break
		}
	}
	return page, nil
}

// held is a Sink: the scheduler's timers, by id.
type held struct {
	mu      sync.Mutex
	m       map[int64]time.Time
	changed chan struct{} // closed and replaced at each schedule
}

func newHeld() *held { return &held{m: map[int64]time.Time{}, changed: make(chan struct{})} }

func (h *held) schedule(_ context.Context, ts []hourglass.DueItem) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range ts {
		h.m[t.ID] = t.At
	}
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

// waitFor waits until cond holds of what h holds, checking it at each
// schedule, or fails the test after 5 s.
func (h *held) waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	giveUp := time.NewTimer(5 * time.Second)
	defer giveUp.Stop()
	for {
		h.mu.Lock()
		changed := h.changed
		h.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-giveUp.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (h *held) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

func (h *held) has(id int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[id]
	return ok
}

// deliver empties the sink and removes what it held from tb: delivered
// items leave the database.
func (h *held) deliver(tb *table) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.items = slices.DeleteFunc(tb.items, func(t hourglass.DueItem) bool { _, ok := h.m[t.ID]; return ok })
	clear(h.m)
}

// random returns one of tb's items.
func (tb *table) random() hourglass.DueItem {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.items) == 0 {
		return hourglass.DueItem{}
	}
	return tb.items[rand.IntN(len(tb.items))]
}

var epoch = hourglasstest.Epoch

func at(d time.Duration) time.Time { return epoch.Add(d) }

// TestLoadFollowsTheWindow: a load holds only what is due within the
// window (overdue included), in pages; the next load, later, brings the
// next slice; OnPage reports progress up to the horizon.
func TestLoadFollowsTheWindow(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	tb, h := &table{}, newHeld()
	for i, d := range []time.Duration{-time.Hour, time.Minute, 2 * time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		tb.add(int64(i+1), at(d))
	}
	var progress []int64
	l := window.New(window.Config{Sources: []window.Source{tb.due}, Sink: h.schedule, Window: 3 * time.Minute, PageSize: 1, Clock: clock,
		OnPage: func(to int64) { progress = append(progress, to) }})
	if ok, _ := l.Offer(context.Background(), []hourglass.DueItem{{ID: 99, At: at(0)}}); ok && h.has(99) {
		t.Fatal("an item was accepted before the first load")
	}
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.len(); got != 4 {
		t.Fatalf("the first load holds %d items, want 4 (overdue, 1m, 2m, 2m)", got)
	}
	if got, want := l.Horizon(), hourglass.UnixMilli(at(3*time.Minute)); got != want {
		t.Fatalf("horizon %d, want %d", got, want)
	}
	if !slices.IsSorted(progress) || progress[len(progress)-1] != l.Horizon() {
		t.Fatalf("progress %v: not rising to the horizon %d", progress, l.Horizon())
	}
	clock.Advance(3 * time.Minute)
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.len(); got != 5 {
		t.Fatalf("after the second load: %d items, want 5 (5m joined)", got)
	}
}

// TestOffer: an item created after a load is taken if it is due within the
// horizon, left to a later load otherwise.
func TestOffer(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	tb, h := &table{}, newHeld()
	l := window.New(window.Config{Sources: []window.Source{tb.due}, Sink: h.schedule, Window: time.Minute, Clock: clock})
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	soon, late := tb.add(1, at(30*time.Second)), tb.add(2, at(2*time.Minute))
	if ok, err := l.Offer(context.Background(), []hourglass.DueItem{soon, late}); !ok || err != nil {
		t.Fatalf("Offer = %v, %v", ok, err)
	}
	if !h.has(1) || h.has(2) {
		t.Fatalf("held %v; want only the item due within the horizon", h.m)
	}
	clock.Advance(time.Minute + time.Second)
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !h.has(2) {
		t.Fatal("the next load did not bring the later item")
	}
}

// TestSeveralSources: one horizon over every source; OnPage reports the
// least progress among them.
func TestSeveralSources(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	orders, timers, h := &table{}, &table{}, newHeld()
	orders.add(1, at(time.Second))
	orders.add(2, at(2*time.Second))
	timers.add(hourglass.TimerIDBase, at(time.Second))
	last := int64(math.MinInt64)
	l := window.New(window.Config{Sources: []window.Source{orders.due, timers.due}, Sink: h.schedule, Window: time.Minute, PageSize: 1, Clock: clock,
		OnPage: func(to int64) {
			if to < last {
				t.Errorf("progress went back from %d to %d", last, to)
			}
			last = to
		}})
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.len() != 3 || !h.has(hourglass.TimerIDBase) {
		t.Fatalf("held %v, want both sources' items", h.m)
	}
	if last != l.Horizon() {
		t.Fatalf("final progress %d, want the horizon %d", last, l.Horizon())
	}
}

// TestSourcePage: OnSourcePage names the source that made progress, with
// every item it reports handed to the sink; a later source reports only
// once every earlier one is paged to the end, and its first report comes
// while the least progress (OnPage) still waits for the sources after it.
func TestSourcePage(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	first, second, third, h := &table{}, &table{}, &table{}, newHeld()
	for i := range int64(5) {
		first.add(100+i, at(time.Duration(i)*time.Second))
		second.add(200+i, at(time.Duration(i)*time.Second))
	}
	third.add(300, at(time.Second))
	type report struct {
		source       int
		to, least    int64
		held, second int // items held then: in all, of the second source
	}
	var reports []report
	least := int64(window.InitialHorizon)
	l := window.New(window.Config{Sources: []window.Source{first.due, second.due, third.due}, Sink: h.schedule, Window: time.Minute, PageSize: 2, Clock: clock,
		OnPage: func(to int64) { least = to },
		OnSourcePage: func(source int, to int64) {
			n := 0
			for id := range h.m {
				if id >= 200 && id < 300 {
					n++
				}
			}
			reports = append(reports, report{source, to, least, len(h.m), n})
		}})
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	var firstOfSecond *report
	for i, r := range reports {
		if i > 0 && r.source < reports[i-1].source {
			t.Fatalf("reports %+v: source %d after source %d", reports, r.source, reports[i-1].source)
		}
		if r.source == 1 && firstOfSecond == nil {
			firstOfSecond = &reports[i]
		}
	}
	if firstOfSecond == nil {
		t.Fatalf("reports %+v: none from the second source", reports)
	}
	// Its first page: the first source's 5 items and 2 of its own held,
	// and OnPage's least progress still at the initial horizon (the third
	// source has not been read).
	if r := *firstOfSecond; r.held != 7 || r.second != 2 || r.least != window.InitialHorizon || r.to != hourglass.UnixMilli(at(time.Second))-1 {
		t.Fatalf("the second source's first report %+v, want 7 held (2 of its own), least progress %d, progress to %d",
			r, int64(window.InitialHorizon), hourglass.UnixMilli(at(time.Second))-1)
	}
	if last := reports[len(reports)-1]; last.source != 2 || last.to != l.Horizon() || last.held != 11 {
		t.Fatalf("the last report %+v, want the third source's, up to the horizon %d, 11 held", last, l.Horizon())
	}
}

// TestFailedLoadIsRetried: a query error lowers the horizon back, so the
// next load reads the range again and nothing in it is lost.
func TestFailedLoadIsRetried(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	tb, h := &table{}, newHeld()
	l := window.New(window.Config{Sources: []window.Source{tb.due}, Sink: h.schedule, Window: time.Minute, Clock: clock})
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	tb.add(1, at(90*time.Second))
	clock.Advance(time.Minute)
	tb.fail = errors.New("connection lost")
	if err := l.Load(context.Background()); err == nil {
		t.Fatal("the load did not report the query's error")
	}
	if l.Horizon() > hourglass.UnixMilli(at(time.Minute)) {
		t.Fatalf("the horizon stayed at %d after a failed load", l.Horizon())
	}
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !h.has(1) {
		t.Fatal("the item of the failed range was not loaded by the next load")
	}
}

// TestMaxHeld: at most MaxHeld items are handed to the sink by loads and
// offers; what is left is loaded again once half has drained (Released
// wakes Run), earliest first, and in the end every item is handed over.
func TestMaxHeld(t *testing.T) {
	t.Parallel()
	const n, maxHeld = 100, 10
	clock := hourglasstest.NewClock(epoch)
	tb, h := &table{}, newHeld()
	for i := range n {
		tb.add(int64(i+1), at(time.Duration(i)*time.Millisecond-time.Minute))
	}
	l := window.New(window.Config{Sources: []window.Source{tb.due}, Sink: h.schedule, Window: time.Minute, LoadInterval: time.Hour, PageSize: 7,
		MaxHeld: maxHeld, Held: h.len, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Each look samples what is held, offers one item and drains a full
	// sink, racing Run's loads.
	seen := map[int64]bool{}
	handed := false
	defer func() {
		if !handed { // Eventually failed the test: say how far it got
			t.Logf("%d of %d items handed over", len(seen), n)
		}
	}()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("all %d items handed over", n), func() bool {
		h.mu.Lock()
		if len(h.m) > maxHeld {
			t.Fatalf("%d items held, MaxHeld %d", len(h.m), maxHeld)
		}
		for id := range h.m {
			seen[id] = true
		}
		h.mu.Unlock()
		if len(seen) >= n {
			return true
		}
		// Offers race the loads: they must respect the bound too.
		if it := tb.random(); it.ID != 0 {
			l.Offer(ctx, []hourglass.DueItem{it})
		}
		if h.len() == maxHeld {
			h.deliver(tb)
			l.Released()
		}
		return false
	})
	handed = true
}

// TestGainedPartitions: a partition gained after its items fell due is
// loaded at once (overdue ones included), and only the owned partitions
// are loaded at all.
func TestGainedPartitions(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	tb, h := &table{}, newHeld()
	for id := int64(1); id <= 4; id++ {
		tb.add(id, at(time.Duration(id)*time.Second))
	}
	own := hourglasstest.NewOwnership(hourglass.PartitionOf(1), hourglass.PartitionOf(2))
	var l *window.Loader
	parts := cluster.Track(own, func() { l.Wake() })
	l = window.New(window.Config{Sources: []window.Source{tb.due}, Sink: h.schedule, Window: time.Minute, LoadInterval: time.Hour, Parts: parts, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	h.waitFor(t, func() bool { return h.has(1) && h.has(2) }, "the owned partitions' items")
	if h.has(3) || h.has(4) {
		t.Fatalf("held %v: items of partitions not owned", h.m)
	}
	clock.Advance(time.Minute) // all due now, and beyond nothing
	own.Move([]int{hourglass.PartitionOf(3)}, nil)
	h.waitFor(t, func() bool { return h.has(3) }, "the gained partition's overdue item")
	if h.has(4) {
		t.Fatal("an item of a partition never owned was loaded")
	}
}

// TestNothingFallsBetweenLoadsAndOffers: items committed while loads run
// (each offered after its commit, as the engine does after CreateOrder)
// end up handed over whenever they are due within the horizon: the
// horizon is raised before the query, so each is seen by a load or taken
// by its offer.
func TestNothingFallsBetweenLoadsAndOffers(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	tb, h := &table{}, newHeld()
	l := window.New(window.Config{Sources: []window.Source{tb.due}, Sink: h.schedule, Window: 100 * time.Millisecond, PageSize: 3, Clock: clock})
	var wg sync.WaitGroup
	const n = 2000
	wg.Go(func() {
		for i := range n {
			it := tb.add(int64(i+1), clock.Now().Add(time.Duration(rand.IntN(200))*time.Millisecond))
			l.Offer(context.Background(), []hourglass.DueItem{it})
		}
	})
	wg.Go(func() {
		for range 400 {
			clock.Advance(time.Millisecond)
			if err := l.Load(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	horizon := l.Horizon()
	for _, it := range tb.items {
		if hourglass.UnixMilli(it.At) <= horizon && !h.has(it.ID) {
			t.Fatalf("item %d due %s, within the horizon, was never handed over", it.ID, it.At)
		}
	}
}

// TestOfferSinkFailure: a sink's error reaches Offer's caller (the engine
// logs it and leaves the item to the loader or the sweeper), and Offer
// neither reorders nor filters the caller's slice in place.
func TestOfferSinkFailure(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(epoch)
	tb := &table{}
	broken := errors.New("scheduler gone")
	var got []hourglass.DueItem
	sink := func(_ context.Context, ts []hourglass.DueItem) error { got = ts; return broken }
	for _, maxHeld := range []int{0, 10} {
		l := window.New(window.Config{Sources: []window.Source{tb.due}, Sink: sink, Window: time.Minute, Clock: clock,
			MaxHeld: maxHeld, Held: func() int { return 0 }})
		l.Load(context.Background()) // empty: sinks nothing
		items := []hourglass.DueItem{{ID: 2, At: at(30 * time.Second)}, {ID: 3, At: at(time.Hour)}, {ID: 1, At: at(time.Second)}}
		before := slices.Clone(items)
		if _, err := l.Offer(context.Background(), items); !errors.Is(err, broken) {
			t.Fatalf("MaxHeld %d: Offer = %v, want the sink's error", maxHeld, err)
		}
		if !slices.Equal(items, before) {
			t.Fatalf("MaxHeld %d: Offer changed the caller's slice to %v", maxHeld, items)
		}
		if len(got) != 2 || slices.ContainsFunc(got, func(t hourglass.DueItem) bool { return t.ID == 3 }) {
			t.Fatalf("MaxHeld %d: sink got %v, want the two items within the horizon", maxHeld, got)
		}
	}
}
