package hourglasstest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// BurstSettler is what SettleBurst drives: a store's closes and reminders.
type BurstSettler interface {
	CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error)
	RemindOrders(ctx context.Context, ids []int64) ([]hourglass.RemindedOrder, error)
}

// SettleBurst settles the n orders with consecutive ids from first (all
// due, or all reminded, at the store's now): their reminders, or with
// closes, their closes, in batches of batch ids sent by callers goroutines
// at once, as the engine's senders do; each call must settle its whole
// batch. It returns the orders settled per second. The stores' burst
// benchmarks (BenchmarkRemindOrdersBurst) run it on reminders and on
// closes alternately, so a reminder's cost and a close's compare in one
// run.
func SettleBurst(b *testing.B, s BurstSettler, closes bool, first int64, n, batch, callers int) float64 {
	b.Helper()
	ctx := context.Background()
	what := "remind"
	if closes {
		what = "close"
	}
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int64)
	for range callers {
		wg.Go(func() {
			for lo := range next {
				ids := make([]int64, 0, batch)
				for id := lo; id < min(lo+int64(batch), first+int64(n)); id++ {
					ids = append(ids, id)
				}
				var done int
				var err error
				if closes {
					var closed []hourglass.ClosedOrder
					closed, err = s.CloseOrders(ctx, ids)
					done = len(closed)
				} else {
					var reminded []hourglass.RemindedOrder
					reminded, err = s.RemindOrders(ctx, ids)
					done = len(reminded)
				}
				if err != nil || done != len(ids) {
					b.Errorf("%s: %d of %d: %v", what, done, len(ids), err)
				}
			}
		})
	}
	for lo := first; lo < first+int64(n); lo += int64(batch) {
		next <- lo
	}
	close(next)
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BurstShape is one configuration of a burst benchmark: ids per call and
// calls at once.
type BurstShape struct{ Batch, Callers int }

// RemindBurstBench is the stores' BenchmarkRemindOrdersBurst: for each
// shape, reminders and closes alternately, it opens a store on a clock at
// Epoch (open), has seed add 100,000 pending orders of a new product,
// reminded at the clock's now and due a minute later (their ids
// consecutive from the one it returns), and reports SettleBurst's rate as
// "reminds/s" or "closes/s".
func RemindBurstBench[S BurstSettler](b *testing.B, shapes []BurstShape, open func(testing.TB, *Clock) S,
	seed func(tb testing.TB, s S, sku string, n int, remindAt, deadline time.Time) (first int64)) {
	for _, c := range shapes {
		for _, what := range []string{"remind", "close"} {
			b.Run(fmt.Sprintf("%s/batch=%d/callers=%d", what, c.Batch, c.Callers), func(b *testing.B) {
				const n = 100_000
				clock := NewClock(Epoch)
				s := open(b, clock)
				for i := range b.N {
					b.StopTimer()
					first := seed(b, s, fmt.Sprintf("SKU%d", i), n, clock.Now(), clock.Now().Add(time.Minute))
					clock.Advance(time.Millisecond)
					if what == "close" {
						clock.Advance(time.Minute)
					}
					b.StartTimer()
					b.ReportMetric(SettleBurst(b, s, what == "close", first, n, c.Batch, c.Callers), what+"s/s")
				}
			})
		}
	}
}
