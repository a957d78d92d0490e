// Package sinktest is the conformance suite every event sink runs against
// its real broker (eventsink/kafka against kfake, the others against the
// services on loopback): Run publishes events of many orders, some of them
// visible only after later ones and some never (the gaps a database's
// sequences leave), through an eventsink.Publisher, and reads them back with
// a consumer of the broker. It checks that every event arrives (at least
// once), in order per key after dropping duplicates by id, with its id,
// type and body; through a broker outage (nothing lost, the lag grows and
// then drains); across a Publisher that stops and another that resumes
// from the cursors (duplicates counted); and with two Publishers splitting
// the partitions (each event published once). The store side, the
// EventLog of each database, is exercised by package eventsink's tests.
package sinktest

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/internal/testenv"
)

// Received is one message as a consumer of the bus read it.
type Received struct {
	ID, Type, Key string
	Body          []byte
}

// Destination is a topic, exchange, subject or stream of one test's own.
type Destination struct {
	// URL is the sink URL. When the Destination was asked for with an
	// outage, it reaches the broker through something Cut can break.
	URL string
	// Read returns every message delivered to the destination so far, in
	// the order the bus holds them (per key at least). It may be called
	// again: each call returns everything since the start.
	Read func(t *testing.T) []Received
	// Cut makes the broker unreachable (or stops it); Restore undoes it.
	// Set when asked for with an outage.
	Cut, Restore func(t *testing.T)
}

// Harness is what a sink package gives the suite.
type Harness struct {
	// Destination creates a destination of t's own, deleted in
	// t.Cleanup; outage asks for one that Cut can break.
	Destination func(t *testing.T, outage bool) Destination
	// Open opens the sink for a Destination's URL.
	Open func(ctx context.Context, url string) (eventsink.Sink, error)
}

// OutageDuration is how long the outage case cuts the broker: 5 s in the
// Default tier, 30 s in the Full tier, or HOURGLASS_TEST_SINK_OUTAGE (a Go
// duration, e.g. 10s).
func OutageDuration(t *testing.T) time.Duration {
	if s := os.Getenv("HOURGLASS_TEST_SINK_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("HOURGLASS_TEST_SINK_OUTAGE=%q: %v", s, err)
		}
		return d
	}
	if testenv.Selected(testenv.Full) {
		return 30 * time.Second
	}
	return 5 * time.Second
}

// Run runs every case against h in the Default tier, and the outage case
// only (for 30 s, OutageDuration) in the Full tier. The calling test states
// both tiers (testenv.Require) before it builds h.
func Run(t *testing.T, h Harness) {
	if !testenv.Selected(testenv.Default) {
		t.Run("Outage", func(t *testing.T) { testOutage(t, h) })
		return
	}
	t.Run("OrderPerKey", func(t *testing.T) { testOrderPerKey(t, h) })
	t.Run("Outage", func(t *testing.T) { testOutage(t, h) })
	t.Run("Resume", func(t *testing.T) { testResume(t, h) })
	t.Run("SplitPartitions", func(t *testing.T) { testSplit(t, h) })
}

// writer writes events of keys orders the way concurrent transactions
// would: about one in eight takes its seq and becomes visible a few events
// later, about one in thirty never does (a rollback), and an order's next
// event is written only after its previous one committed. want holds each
// order's committed events in order.
type writer struct {
	log  *MemLog
	rng  *rand.Rand
	keys int
	mu   sync.Mutex
	want map[int64][]hourglass.EventRecord
	held map[int64]int64 // order → seq reserved, not committed yet
	n    int
}

func newWriter(log *MemLog, keys int, seed uint64) *writer {
	return &writer{log: log, rng: rand.New(rand.NewPCG(seed, 1)), keys: keys, want: map[int64][]hourglass.EventRecord{}, held: map[int64]int64{}}
}

var types = []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid, hourglass.EventOrderShipped, hourglass.EventOrderCompleted}

// write writes n events.
func (w *writer) write(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range n {
		order := int64(1 + w.rng.IntN(w.keys))
		if seq, ok := w.held[order]; ok { // its transaction commits first
			delete(w.held, order)
			w.commit(order, seq)
		}
		seq := w.log.Reserve()
		switch r := w.rng.IntN(240); {
		case r < 8: // rolled back
		case r < 38:
			w.held[order] = seq
		default:
			w.commit(order, seq)
		}
		// Held transactions commit a few events later.
		if len(w.held) > 4 {
			for o, s := range w.held {
				delete(w.held, o)
				w.commit(o, s)
				break
			}
		}
	}
}

// flush commits every held event.
func (w *writer) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for o, s := range w.held {
		delete(w.held, o)
		w.commit(o, s)
	}
}

func (w *writer) commit(order, seq int64) {
	typ := types[len(w.want[order])%len(types)]
	e := w.log.Commit(seq, order, typ, time.Now())
	w.want[order] = append(w.want[order], e)
	w.n++
}

// total returns the events committed.
func (w *writer) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// publisher starts a Publisher of sink on log until the returned stop is
// called (which waits for it).
func publisher(t *testing.T, name string, sink eventsink.Sink, log hourglass.EventLog, own eventsink.Ownership) (*eventsink.Publisher, func()) {
	t.Helper()
	p, err := eventsink.New(eventsink.Config{
		Name: name, Sink: sink, Log: log, Ownership: own,
		Batch: 64, Poll: 10 * time.Millisecond, Settle: 2 * time.Second,
		SaveInterval: 100 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return p, stop
}

func open(t *testing.T, h Harness, url string) eventsink.Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.Open(ctx, url)
	if err != nil {
		t.Fatalf("open sink %s: %v", eventsink.Redact(url), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// verdict checks got against w's events: every one present with its id,
// type, key and body, in order per key once duplicates are dropped (the
// first copy counts). It returns the duplicates.
func verdict(t *testing.T, w *writer, got []Received) (duplicates int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	byKey := map[string][]Received{}
	for _, r := range got {
		if seen[r.ID] {
			duplicates++
			continue
		}
		seen[r.ID] = true
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	missing := 0
	for order, evs := range w.want {
		key := strconv.FormatInt(order, 10)
		var ids []string
		for _, r := range byKey[key] {
			ids = append(ids, r.ID)
		}
		var want []string
		for _, e := range evs {
			want = append(want, e.ID)
			if !seen[e.ID] {
				missing++
			}
		}
		if missing == 0 && !slices.Equal(ids, want) {
			t.Errorf("key %s: got %v, want %v (in this order)", key, ids, want)
		}
		for i, r := range byKey[key] {
			if i < len(evs) && r.ID == evs[i].ID && (r.Type != string(evs[i].Type) || string(r.Body) != string(evs[i].Body)) {
				t.Errorf("event %s: got type %q body %s, want %q %s", r.ID, r.Type, r.Body, evs[i].Type, evs[i].Body)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d events missing on the bus", missing, w.n)
	}
	return duplicates
}

// waitAll waits until the destination holds every event w committed.
func waitAll(t *testing.T, d Destination, w *writer, within time.Duration) []Received {
	t.Helper()
	var got []Received
	testenv.Eventually(t, within, "every event on the bus", func() bool {
		got = d.Read(t)
		ids := map[string]bool{}
		for _, r := range got {
			ids[r.ID] = true
		}
		return len(ids) >= w.total()
	})
	return got
}

func testOrderPerKey(t *testing.T, h Harness) {
	d := h.Destination(t, false)
	log := NewMemLog()
	w := newWriter(log, 40, 1)
	w.write(500)
	p, _ := publisher(t, "order-per-key", open(t, h, d.URL), log, nil)
	w.write(500)
	w.flush()
	got := waitAll(t, d, w, 60*time.Second)
	dup := verdict(t, w, got)
	t.Logf("%d events of 40 orders on the bus, %d duplicates; published %d", w.total(), dup, p.Published())
}

func testOutage(t *testing.T, h Harness) {
	d := h.Destination(t, true)
	log := NewMemLog()
	w := newWriter(log, 40, 2)
	p, _ := publisher(t, "outage", open(t, h, d.URL), log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	writing := make(chan struct{})
	go func() { // about 200 events/s throughout
		defer close(writing)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			w.write(2)
		}
	}()
	testenv.Phase(t, time.Second, "events flow to the broker")
	outage := OutageDuration(t)
	d.Cut(t)
	cutAt := time.Now()
	testenv.Phase(t, outage, "the broker cut while events are written")
	lag := p.Lag()
	d.Restore(t)
	back := time.Now()
	t.Logf("broker cut for %s: lag %s at the end", time.Since(cutAt).Round(time.Millisecond), lag.Round(time.Millisecond))
	if lag < outage/2 {
		t.Errorf("lag after a %s outage: %s, want at least %s", outage, lag, outage/2)
	}
	testenv.Phase(t, time.Second, "events flow again after the broker is back")
	cancel()
	<-writing
	w.flush()
	got := waitAll(t, d, w, 2*time.Minute)
	testenv.Eventually(t, 30*time.Second, "the lag drains to 0", func() bool { return p.Lag() == 0 })
	dup := verdict(t, w, got)
	t.Logf("%d events on the bus (the writer ran 1 s past the outage), lag 0 within %s of the broker's return, %d duplicates", w.total(), time.Since(back).Round(time.Millisecond), dup)
}

func testResume(t *testing.T, h Harness) {
	d := h.Destination(t, false)
	log := NewMemLog()
	w := newWriter(log, 40, 3)
	sink := open(t, h, d.URL)
	p1, stop1 := publisher(t, "resume", sink, log, nil)
	w.write(600)
	testenv.Eventually(t, 30*time.Second, "the first publisher publishes some", func() bool { return p1.Published() > 100 })
	stop1()
	w.write(400)
	w.flush()
	p2, _ := publisher(t, "resume", sink, log, nil)
	got := waitAll(t, d, w, 60*time.Second)
	dup := verdict(t, w, got)
	t.Logf("%d events; the first publisher published %d, the second %d (it resumed from seq %d); %d duplicates", w.total(), p1.Published(), p2.Published(), log.MinCursor("resume"), dup)
}

// halves is an Ownership of the even or odd partitions, then of all or
// none once swap is called.
type halves struct {
	mu    sync.Mutex
	parts hourglass.Parts
	fns   []func(gained, lost []int)
}

func newHalves(odd bool) *halves {
	h := &halves{parts: hourglass.Parts{}}
	for p := range hourglass.Partitions {
		if (p%2 == 1) == odd {
			h.parts = append(h.parts, p)
		}
	}
	return h
}

func (h *halves) Owned() hourglass.Parts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.parts)
}

func (h *halves) OnChange(fn func(gained, lost []int)) {
	h.mu.Lock()
	h.fns = append(h.fns, fn)
	h.mu.Unlock()
}

func (h *halves) set(parts hourglass.Parts) {
	h.mu.Lock()
	h.parts = parts
	fns := slices.Clone(h.fns)
	h.mu.Unlock()
	for _, fn := range fns {
		fn(nil, nil)
	}
}

func testSplit(t *testing.T, h Harness) {
	d := h.Destination(t, false)
	log := NewMemLog()
	w := newWriter(log, 64, 4)
	even, odd := newHalves(false), newHalves(true)
	pe, _ := publisher(t, "split", open(t, h, d.URL), log, even)
	po, _ := publisher(t, "split", open(t, h, d.URL), log, odd)
	w.write(800)
	w.flush()
	got := waitAll(t, d, w, 60*time.Second)
	if dup := verdict(t, w, got); dup != 0 {
		t.Errorf("two publishers on halves of the partitions: %d duplicates, want 0", dup)
	}
	t.Logf("even partitions: %d published, odd: %d", pe.Published(), po.Published())
	// The odd node leaves: the even one takes every partition over from
	// the odd one's cursors.
	all := hourglass.Parts{}
	for p := range hourglass.Partitions {
		all = append(all, p)
	}
	odd.set(hourglass.Parts{})
	even.set(all)
	w.write(400)
	w.flush()
	got = waitAll(t, d, w, 60*time.Second)
	dup := verdict(t, w, got)
	t.Logf("after the takeover: %d events, %d duplicates", w.total(), dup)
}

// Name returns a name of t's own for a topic, exchange, stream or subject:
// "hgsink_" and 12 random hex digits (letters, digits and _ only, which
// every broker accepts).
func Name(t *testing.T) string {
	return "hgsink_" + strconv.FormatUint(rand.Uint64()&(1<<48-1), 16)
}
