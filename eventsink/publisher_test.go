package eventsink_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/eventsink/sinktest"
	"github.com/hourglass/hourglass/internal/testenv"
)

type countingObserver struct{ published, failed atomic.Int64 }

func (o *countingObserver) EventsPublished(_ string, n int) { o.published.Add(int64(n)) }
func (o *countingObserver) EventSinkFailed(string)          { o.failed.Add(1) }

// run starts a Publisher of sink over log until the test ends.
func run(t *testing.T, log hourglass.EventLog, sink eventsink.Sink, settle time.Duration, obs eventsink.Observer) *eventsink.Publisher {
	t.Helper()
	p, err := eventsink.New(eventsink.Config{Name: "test", Sink: sink, Log: log, Poll: 5 * time.Millisecond, Settle: settle,
		SaveInterval: 5 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

func ids(ms []eventsink.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// TestGapHoldsTheCursor: a seq taken and not committed (a transaction in
// flight) keeps the cursor below it while later events are published;
// once it commits it is published; a seq never committed (rolled back) is
// let go after Settle and the cursor passes it.
func TestGapHoldsTheCursor(t *testing.T) {
	t.Parallel()
	log := sinktest.NewMemLog()
	sink := &memSink{}
	now := time.Now()
	inFlight := log.Reserve()                                // seq 1
	later := log.Append(2, hourglass.EventOrderCreated, now) // seq 2
	run(t, log, sink, 300*time.Millisecond, nil)
	testenv.Eventually(t, 5*time.Second, "the later event published", func() bool { return len(sink.messages()) == 1 })
	if c := log.MinCursor("test"); c != 0 {
		t.Errorf("cursor %d with seq 1 in flight, want 0", c)
	}
	late := log.Commit(inFlight, 1, hourglass.EventOrderCreated, now)
	testenv.Eventually(t, 5*time.Second, "the late event published", func() bool { return len(sink.messages()) == 2 })
	if got := ids(sink.messages()); got[0] != later.ID || got[1] != late.ID {
		t.Errorf("published %v, want %s then %s", got, later.ID, late.ID)
	}
	testenv.Eventually(t, 5*time.Second, "the cursor past both", func() bool { return log.MinCursor("test") == 2 })

	rolledBack := log.Reserve() // seq 3, never committed
	last := log.Append(3, hourglass.EventOrderCreated, now)
	testenv.Eventually(t, 5*time.Second, "the event after the rolled-back seq published", func() bool { return len(sink.messages()) == 3 })
	if c := log.MinCursor("test"); c >= rolledBack {
		t.Errorf("cursor %d right after seq %d was taken, want below it until Settle", c, rolledBack)
	}
	testenv.Eventually(t, 5*time.Second, "the cursor past the rolled-back seq after Settle", func() bool { return log.MinCursor("test") == last.Seq })
}

// TestLateEventBeforeLaterOfItsOrder: an order's event that commits after
// a later seq of another order was read is published before the order's
// next event, which its transaction could only write after it committed.
func TestLateEventBeforeLaterOfItsOrder(t *testing.T) {
	t.Parallel()
	log := sinktest.NewMemLog()
	sink := &memSink{}
	now := time.Now()
	first := log.Reserve()                          // order 1's created, in flight
	log.Append(2, hourglass.EventOrderCreated, now) // another order's, visible
	run(t, log, sink, 10*time.Second, nil)
	testenv.Eventually(t, 5*time.Second, "order 2's event published", func() bool { return len(sink.messages()) == 1 })
	created := log.Commit(first, 1, hourglass.EventOrderCreated, now)
	paid := log.Append(1, hourglass.EventOrderPaid, now)
	testenv.Eventually(t, 5*time.Second, "order 1's events published", func() bool { return len(sink.messages()) == 3 })
	var order1 []string
	for _, m := range sink.messages() {
		if m.Key == "1" {
			order1 = append(order1, m.ID)
		}
	}
	if len(order1) != 2 || order1[0] != created.ID || order1[1] != paid.ID {
		t.Errorf("order 1's events on the bus: %v, want %s then %s", order1, created.ID, paid.ID)
	}
}

// TestDatabaseDown: while the event log cannot be read the Publisher
// retries (each failure counted) and loses nothing.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	log := sinktest.NewMemLog()
	sink := &memSink{}
	obs := &countingObserver{}
	run(t, log, sink, time.Second, obs)
	log.SetFailing(true)
	for i := range 100 {
		log.Append(int64(i%7), hourglass.EventOrderCreated, time.Now())
	}
	testenv.Eventually(t, 5*time.Second, "failures counted", func() bool { return obs.failed.Load() >= 3 })
	log.SetFailing(false)
	testenv.Eventually(t, 5*time.Second, "every event published", func() bool { return len(sink.messages()) == 100 })
	if n := obs.published.Load(); n != 100 {
		t.Errorf("observer counted %d published, want 100", n)
	}
}

// TestGapReadFails: when reading the gaps fails after a page of new events
// was read, that page is not lost: it is read again, and published once
// the gaps can be read.
func TestGapReadFails(t *testing.T) {
	t.Parallel()
	log := sinktest.NewMemLog()
	sink := &memSink{}
	obs := &countingObserver{}
	now := time.Now()
	inFlight := log.Reserve() // a gap at seq 1
	log.SetFailingRanges(true)
	a := log.Append(2, hourglass.EventOrderCreated, now)
	run(t, log, sink, 10*time.Second, obs)
	testenv.Eventually(t, 5*time.Second, "failures counted", func() bool { return obs.failed.Load() >= 3 })
	b := log.Append(3, hourglass.EventOrderCreated, now)
	log.SetFailingRanges(false)
	testenv.Eventually(t, 5*time.Second, "the events after the gap published", func() bool { return len(sink.messages()) == 2 })
	c := log.Commit(inFlight, 1, hourglass.EventOrderCreated, now)
	testenv.Eventually(t, 5*time.Second, "the gap's event published", func() bool { return len(sink.messages()) == 3 })
	got := ids(sink.messages())
	if got[0] != a.ID || got[1] != b.ID || got[2] != c.ID {
		t.Errorf("published %v, want %s, %s, %s", got, a.ID, b.ID, c.ID)
	}
}

// TestMaxGaps: with room for one gap, a second hole is not read past until
// the first settles; no event behind either is lost.
func TestMaxGaps(t *testing.T) {
	t.Parallel()
	log := sinktest.NewMemLog()
	sink := &memSink{}
	now := time.Now()
	first := log.Reserve()
	a := log.Append(2, hourglass.EventOrderCreated, now)
	second := log.Reserve()
	b := log.Append(3, hourglass.EventOrderCreated, now)
	p, err := eventsink.New(eventsink.Config{Name: "test", Sink: sink, Log: log, Poll: 5 * time.Millisecond, Settle: 200 * time.Millisecond, MaxGaps: 1,
		SaveInterval: 5 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 5*time.Second, "the event between the holes published", func() bool { return len(sink.messages()) == 1 })
	c := log.Commit(second, 4, hourglass.EventOrderCreated, now) // fills the second hole before it was read past
	testenv.Eventually(t, 5*time.Second, "the rest published", func() bool { return len(sink.messages()) == 3 })
	got := ids(sink.messages())
	if got[0] != a.ID || got[1] != c.ID || got[2] != b.ID {
		t.Errorf("published %v, want %s, %s, %s", got, a.ID, c.ID, b.ID)
	}
	testenv.Eventually(t, 5*time.Second, "the cursor past the settled first hole", func() bool { return log.MinCursor("test") == b.Seq })
	_ = first
}
