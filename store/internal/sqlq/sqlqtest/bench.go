package sqlqtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// OrderListSizeEnv names the variable that sets how many orders the list
// benchmarks fill (BenchOrderListSize).
const OrderListSizeEnv = "HOURGLASS_BENCH_ORDER_LIST"

// BenchOrderListSize is the number of orders a list benchmark fills:
// OrderListSizeEnv, or 50,000 (a quick run; the figures in BENCHMARKS.md
// are of 1,000,000), rounded down to a multiple of 100.
func BenchOrderListSize(b *testing.B) int {
	return max(testenv.PositiveInt(b, OrderListSizeEnv, 50_000)/100*100, 100)
}

// BenchOrderLists reads pages of GET /v1/orders' size (50 orders, asked as
// the API asks: one more) through list, for each of OrderListPlans(n) on a
// table filled with n orders as they describe, and reports each page's
// latency at the 50th and 99th percentiles (p50-ms, p99-ms). Each
// iteration reads one of the first 64 pages of a cursor walk, so a run
// reads later pages too.
func BenchOrderLists(b *testing.B, n int, list func(ctx context.Context, f hourglass.OrderFilter) ([]hourglass.Order, error)) {
	ctx := context.Background()
	for _, c := range OrderListPlans(n) {
		b.Run(c.Name, func(b *testing.B) {
			// The cursors of the walk's pages, read once before the clock runs.
			f := c.Filter
			f.Limit = 51
			cursors := []hourglass.OrderFilter{f}
			for len(cursors) < 64 {
				page, err := list(ctx, cursors[len(cursors)-1])
				if err != nil {
					b.Fatal(err)
				}
				if len(page) < f.Limit {
					break
				}
				next := cursors[len(cursors)-1]
				last := page[f.Limit-2]
				next.After, next.AfterAt = last.ID, f.Sort().SortKey(last)
				cursors = append(cursors, next)
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if _, err := list(ctx, cursors[i%len(cursors)]); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			at := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))]) / 1e6 }
			b.ReportMetric(at(0.5), "p50-ms")
			b.ReportMetric(at(0.99), "p99-ms")
		})
	}
}
