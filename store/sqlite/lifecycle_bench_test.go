package sqlite_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/sqlite"
)

// BenchmarkOrderLifecycle runs the writes `hourglass bench` makes of each
// order, in its proportions, on one store: a create (64 callers at once),
// a pay of 30% of the orders (one call each, 64 at once) and the close of
// the rest in calls of 8 ids from 4 callers (the dispatcher's workers, a
// few due each millisecond). It reports the process's CPU per order: the
// writer's serial cost, which bounds the rate one node keeps up with.
func BenchmarkOrderLifecycle(b *testing.B) {
	const (
		round    = 2048 // orders per round
		callers  = 64
		closers  = 4
		perClose = 8
	)
	ctx := context.Background()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s, err := sqlite.Open(sqlite.Config{Dir: b.TempDir(), Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "BENCH", Category: "bench", Available: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	items := []hourglass.Item{{SKU: "BENCH", Quantity: 1}}
	// each runs fn(i) for i in [0, n) on workers goroutines.
	each := func(n, workers int, fn func(i int) error) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Go(func() {
				for i := range next {
					if err := fn(i); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		ids := make([]int64, n)
		each(n, callers, func(i int) error {
			o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "bench", Items: items, Timeout: 2 * time.Second})
			ids[i] = o.ID
			return err
		})
		var unpaid []int64
		var pays []int64
		for i, id := range ids {
			if i%10 < 3 {
				pays = append(pays, id)
			} else {
				unpaid = append(unpaid, id)
			}
		}
		each(len(pays), callers, func(i int) error {
			_, err := s.PayOrder(ctx, pays[i], fmt.Sprint("pay-", pays[i]))
			return err
		})
		clock.Advance(2 * time.Second)
		each((len(unpaid)+perClose-1)/perClose, closers, func(i int) error {
			batch := unpaid[i*perClose : min(len(unpaid), (i+1)*perClose)]
			closed, err := s.CloseOrders(ctx, batch)
			if err == nil && len(closed) != len(batch) {
				err = fmt.Errorf("closed %d of %d", len(closed), len(batch))
			}
			return err
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/order")
}
