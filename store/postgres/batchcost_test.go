package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// backendNanos returns the CPU time used so far by the server processes
// connected to s's database, from /proc/<pid>/schedstat (nanoseconds), or
// 0 when the server is not on this machine.
func backendNanos(tb testing.TB, s *Store) time.Duration {
	var total time.Duration
	for _, pid := range backendPIDs(tb, s) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return 0
		}
		f := strings.Fields(string(stat))
		if len(f) == 0 {
			return 0
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0
		}
		total += time.Duration(ns)
	}
	return total
}

// BenchmarkCreateBatch runs batches of n creates (one item each, over
// 1,000 products) through the group commit's dialect, one batch at a time,
// and reports the server's CPU per batch (server-µs/batch): the fixed cost
// of a batch is its value at n=1, the per-create part its slope.
func BenchmarkCreateBatch(b *testing.B) {
	s := openForPlans(b, thousandProducts...)
	ctx := context.Background()
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("creates=%d", n), func(b *testing.B) {
			ops := make([]*batch.Op, n)
			run := func(i int) {
				for j := range ops {
					items := []hourglass.Item{{SKU: fmt.Sprintf("sku-%05d", 1+(i*n+j)%1000), Quantity: 1}}
					ops[j] = &batch.Op{Kind: batch.Create, Create: hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour, Items: items},
						Items: stored.EncodeItems(items)}
				}
				if _, err := (dialect{s}).Run(ctx, ops); err != nil {
					b.Fatal(err)
				}
				for _, o := range ops {
					if o.Res.Err != nil {
						b.Fatal(o.Res.Err)
					}
				}
			}
			for i := range 20 { // every statement prepared and its plan settled
				run(i)
			}
			server := -backendNanos(b, s)
			b.ResetTimer()
			for i := range b.N {
				run(i)
			}
			b.StopTimer()
			if server += backendNanos(b, s); server > 0 {
				b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/batch")
			}
		})
	}
}

// BenchmarkCloseBatchGrown closes batches of 16 orders through the group
// commit's dialect on a table that grew to 100,000 orders after the
// store's connections prepared their statements on 300 (the first minute
// of a new database, or autovacuum off), and reports the server's CPU per
// batch: a plan cached while the table was small must not read it whole
// now (issue #40). "analyzed at 300": the statistics were taken then (an
// ANALYZE, or VACUUM, while the table was small, and none since).
func BenchmarkCloseBatchGrown(b *testing.B) {
	b.Run("never analyzed", func(b *testing.B) { closeBatchGrown(b, false, 300, 16) })
	b.Run("analyzed at 300", func(b *testing.B) { closeBatchGrown(b, true, 300, 16) })
	// The plans made on the grown table, as when a burst comes on a full
	// one: a large batch's cost with plans that never saw the table
	// small, beside the two cases above.
	b.Run("planned at 100,000, 512 closes", func(b *testing.B) { closeBatchGrown(b, false, 100000, 512) })
}

// closeBatchGrown closes batches of batchSize orders once the store
// prepared its statements on warmAt orders and the table grew to
// 100,000.
func closeBatchGrown(b *testing.B, analyze bool, warmAt, batchSize int) {
	s := openForPlans(b)
	ctx := context.Background()
	exec := func(q string) {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	fill := func(from, to int) {
		exec(fmt.Sprintf(`INSERT INTO orders (id, user_id, status, items, created_at, deadline)
SELECT g, 'u', 'pending_payment', '[]', 0, 0 FROM generate_series(%d, %d) g`, from, to))
	}
	next := int64(1)
	run := func() {
		ids := make([]int64, batchSize)
		for i := range ids {
			ids[i] = next
			next++
		}
		op := &batch.Op{Kind: batch.Close, IDs: ids}
		if _, err := (dialect{s}).Run(ctx, []*batch.Op{op}); err != nil {
			b.Fatal(err)
		}
		if op.Res.Err != nil {
			b.Fatal(op.Res.Err)
		}
	}
	fill(1, warmAt)
	if analyze {
		exec(`ANALYZE`)
	}
	for range min(20, warmAt/batchSize) { // every statement prepared, its plan settled
		run()
	}
	if warmAt < 100000 {
		fill(warmAt+1, 100000)
		next = int64(warmAt) + 1
	}
	server := -backendNanos(b, s)
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	if server += backendNanos(b, s); server > 0 {
		b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/batch")
	}
}
