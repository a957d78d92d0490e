package mysql_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// The benchmarks run against the database server's clock (Config.Clock
// nil), with 64 goroutines per core calling the store as an API would.

// BenchmarkCreateOrder: parallel creates spread over 1000 SKUs.
func BenchmarkCreateOrder(b *testing.B) {
	for _, items := range []int{1, 5} {
		b.Run(fmt.Sprintf("items=%d", items), func(b *testing.B) {
			ctx := context.Background()
			s := open(b, mytest.NewDatabase(b), nil, false)
			const skus = 1000
			for i := range skus {
				if _, err := s.PutProduct(ctx, hourglass.Product{SKU: fmt.Sprintf("S%04d", i), Available: 1 << 40}); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.Add(1)
					its := make([]hourglass.Item, items)
					for j := range its {
						its[j] = hourglass.Item{SKU: fmt.Sprintf("S%04d", (n*7+int64(j)*131)%skus), Quantity: 1}
					}
					if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: its, Timeout: time.Hour}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
		})
	}
}

// BenchmarkCreateOrderHotSKU: every create reserves the same SKU.
func BenchmarkCreateOrderHotSKU(b *testing.B) {
	ctx := context.Background()
	s := open(b, mytest.NewDatabase(b), nil, false)
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "HOT", Available: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "HOT", Quantity: 1}}, Timeout: time.Hour}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	p, err := s.Product(ctx, "HOT")
	if err != nil || p.Reserved != int64(b.N) {
		b.Fatalf("HOT reserved %d after %d creates (%v)", p.Reserved, b.N, err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
}

// BenchmarkCloseOrders: closes of due orders over 100 SKUs, 100 ids per
// CloseOrders call (as the engine's batch closer sends them), 8 callers.
func BenchmarkCloseOrders(b *testing.B) {
	ctx := context.Background()
	clock := &offsetClock{}
	s := open(b, mytest.NewDatabase(b), clock, false)
	for i := range 100 {
		if _, err := s.PutProduct(ctx, hourglass.Product{SKU: fmt.Sprintf("C%03d", i), Available: 1 << 40}); err != nil {
			b.Fatal(err)
		}
	}
	// Create b.N orders in parallel (not timed), then move the clock past
	// their deadlines.
	ids := make([]int64, b.N)
	var next atomic.Int64
	done := make(chan struct{})
	for range 64 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u",
					Items: []hourglass.Item{{SKU: fmt.Sprintf("C%03d", i%100), Quantity: 1}}, Timeout: time.Second})
				if err != nil {
					b.Error(err)
					return
				}
				ids[i] = o.ID
			}
		}()
	}
	for range 64 {
		<-done
	}
	clock.offset.Store(int64(time.Hour))
	var closed atomic.Int64
	var chunk atomic.Int64
	b.ResetTimer()
	fin := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { fin <- struct{}{} }()
			for {
				c := chunk.Add(1) - 1
				lo := c * 100
				if lo >= int64(b.N) {
					return
				}
				hi := min(lo+100, int64(b.N))
				got, err := s.CloseOrders(ctx, ids[lo:hi])
				if err != nil {
					b.Error(err)
					return
				}
				closed.Add(int64(len(got)))
			}
		}()
	}
	for range 8 {
		<-fin
	}
	b.StopTimer()
	if closed.Load() != int64(b.N) {
		b.Fatalf("closed %d of %d", closed.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "closes/s")
}

// offsetClock is the system clock plus an offset (to make orders due
// without waiting).
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time {
	return hourglass.SystemClock{}.Now().Add(time.Duration(c.offset.Load()))
}
