package sinktest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/storetest"
)

// timedSink records, for every message its inner sink acknowledged, the
// time from the event's commit (CreatedAt) to the acknowledgement.
type timedSink struct {
	eventsink.Sink
	mu   sync.Mutex
	lags []time.Duration
}

func (s *timedSink) Publish(ctx context.Context, msgs []eventsink.Message) error {
	if err := s.Sink.Publish(ctx, msgs); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	for _, m := range msgs {
		s.lags = append(s.lags, now.Sub(m.CreatedAt))
	}
	s.mu.Unlock()
	return nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// Bench measures a sink when HOURGLASS_BENCH_SINKS is set (it is skipped
// otherwise), and logs one line for BENCHMARKS.md:
//
//   - throughput: a backlog of HOURGLASS_BENCH_SINK_EVENTS (default 50,000)
//     events in a MemLog, published by one Publisher with the default
//     Batch (500): events acknowledged per second;
//   - lag: HOURGLASS_BENCH_SINK_RATE orders a second (default 2,000),
//     created by 16 writers on the store HOURGLASS_TEST_STORE names
//     (SQLite in a temporary directory by default; storetest.URL) for HOURGLASS_BENCH_SINK_DURATION (default 10 s), each writing an
//     order.created event, published by a Publisher with the defaults
//     (Poll 50 ms): p50, p99 and max of the time from an event's commit to
//     its broker's acknowledgement;
//   - catch-up: a new sink publishing those events from the store's
//     start: events acknowledged per second, the store's reads included.
func Bench(t *testing.T, h Harness) {
	if os.Getenv("HOURGLASS_BENCH_SINKS") == "" {
		t.Skip("set HOURGLASS_BENCH_SINKS=1 to measure the sink")
	}
	n := testenv.PositiveInt(t, "HOURGLASS_BENCH_SINK_EVENTS", 50000)
	rate := testenv.PositiveInt(t, "HOURGLASS_BENCH_SINK_RATE", 2000)
	dur := 10 * time.Second
	if s := os.Getenv("HOURGLASS_BENCH_SINK_DURATION"); s != "" {
		var err error
		if dur, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}

	// Throughput over a backlog.
	d := h.Destination(t, false)
	log := NewMemLog()
	at := time.Now()
	for i := range n {
		log.Append(int64(1+i%1000), hourglass.EventOrderCreated, at)
	}
	p, err := eventsink.New(eventsink.Config{Name: "bench", Sink: open(t, h, d.URL), Log: log, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); _ = p.Run(ctx) }()
	testenv.Eventually(t, 10*time.Minute, "the backlog published", func() bool { return p.Published() >= int64(n) })
	took := time.Since(start)
	cancel()
	<-done
	perSec := float64(n) / took.Seconds()

	// Lag at rate orders a second on SQLite.
	d2 := h.Destination(t, false)
	dbCtx, dbCancel := context.WithTimeout(context.Background(), 30*time.Second)
	db, err := store.Open(dbCtx, store.Options{URL: storetest.URL(t)})
	dbCancel()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.PutProduct(context.Background(), hourglass.Product{SKU: "bench", Name: "bench", Category: "physical", Available: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	sink := &timedSink{Sink: open(t, h, d2.URL)}
	p2, err := eventsink.New(eventsink.Config{Name: "bench-lag", Sink: sink, Log: db.(hourglass.EventLog)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { defer close(done); _ = p2.Run(ctx) }()
	const writers = 16
	total := int(float64(rate) * dur.Seconds())
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < total; i += writers {
				testenv.Until(t.Context(), begin.Add(time.Duration(i)*time.Second/time.Duration(rate)))
				if _, _, err := db.CreateOrder(context.Background(), hourglass.CreateOrderParams{UserID: "u" + strconv.Itoa(i), Items: []hourglass.Item{{SKU: "bench", Quantity: 1}}, Timeout: time.Hour}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	achieved := float64(total) / time.Since(begin).Seconds()
	testenv.Eventually(t, time.Minute, "every order's event published", func() bool { return p2.Published() >= int64(total) })
	cancel()
	<-done
	sink.mu.Lock()
	lags := slices.Clone(sink.lags)
	sink.mu.Unlock()

	// Catch-up: a new sink publishes the store's events from the start.
	d3 := h.Destination(t, false)
	p3, err := eventsink.New(eventsink.Config{Name: "bench-catch-up", Sink: open(t, h, d3.URL), Log: db.(hourglass.EventLog)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	start = time.Now()
	go func() { defer close(done); _ = p3.Run(ctx) }()
	testenv.Eventually(t, 10*time.Minute, "the catch-up", func() bool { return p3.Published() >= int64(total) })
	catchUp := float64(total) / time.Since(start).Seconds()
	cancel()
	<-done

	line := fmt.Sprintf("backlog of %d events (in memory): %.0f events/s; catch-up of %d events from %s: %.0f events/s; %d orders at %.0f/s on %s: lag p50 %s, p99 %s, max %s",
		n, perSec, total, storetest.Kind(), catchUp, total, achieved, storetest.Kind(), quantile(lags, 0.5).Round(time.Millisecond), quantile(lags, 0.99).Round(time.Millisecond), quantile(lags, 1).Round(time.Millisecond))
	t.Log(line)
}
