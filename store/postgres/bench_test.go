package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// benchStore opens a store with the production settings (database clock,
// default pool and batch) on a new database.
// It reports the mean number of writes per group commit and the mean commit
// time when the benchmark ends.
func benchStore(b *testing.B) *postgres.Store {
	b.Helper()
	var commits, writes, nanos atomic.Int64
	s, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.NewDatabase(b),
		Observe: func(n int, d time.Duration) { commits.Add(1); writes.Add(int64(n)); nanos.Add(int64(d)) }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	b.Cleanup(func() {
		if c := commits.Load(); c > 0 {
			b.Logf("%d group commits, %.1f writes and %.2f ms each", c, float64(writes.Load())/float64(c), float64(nanos.Load())/float64(c)/1e6)
		}
	})
	return s
}

// benchParallelism × GOMAXPROCS goroutines create at once: an API under load.
const benchParallelism = 64

// BenchmarkCreateOrder creates orders of one item each over 1,000 SKUs from
// many goroutines: durable creates per second of one store value.
func BenchmarkCreateOrder(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	const skus = 1000
	for i := range skus {
		if _, err := s.PutProduct(ctx, hourglass.Product{SKU: fmt.Sprintf("S%04d", i), Available: 1 << 40}); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour,
				Items: []hourglass.Item{{SKU: fmt.Sprintf("S%04d", i%skus), Quantity: 1}}})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// BenchmarkCreateOrderHotSKU creates orders of one SKU from many goroutines:
// every order of a batch locks and updates the same product row, which the
// batch writes once.
func BenchmarkCreateOrderHotSKU(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "HOT", Available: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour,
				Items: []hourglass.Item{{SKU: "HOT", Quantity: 1}}})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// BenchmarkCloseOrders closes due orders 512 per call (the engine's batch),
// over 100 SKUs; ns/op is per call, closes/s counts orders.
func BenchmarkCloseOrders(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	const skus, perCall = 100, 512
	for i := range skus {
		if _, err := s.PutProduct(ctx, hourglass.Product{SKU: fmt.Sprintf("S%03d", i), Available: 1 << 40}); err != nil {
			b.Fatal(err)
		}
	}
	// Orders due in 1 s, created in parallel (not timed), then closed.
	ids := make([]int64, b.N*perCall)
	var next atomic.Int64
	done := make(chan error, 32)
	for range 32 {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					done <- nil
					return
				}
				o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Second,
					Items: []hourglass.Item{{SKU: fmt.Sprintf("S%03d", i%skus), Quantity: 1}}})
				if err != nil {
					done <- err
					return
				}
				ids[i] = o.ID
			}
		}()
	}
	for range 32 {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	testenv.Phase(b, 1100*time.Millisecond, "every deadline passes (the database's clock)")
	b.ResetTimer()
	for i := range b.N {
		closed, err := s.CloseOrders(ctx, ids[i*perCall:(i+1)*perCall])
		if err != nil {
			b.Fatal(err)
		}
		if len(closed) != perCall {
			b.Fatalf("closed %d of %d", len(closed), perCall)
		}
	}
	b.ReportMetric(float64(b.N*perCall)/b.Elapsed().Seconds(), "closes/s")
}
