package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkConcurrentBatches prices what a cluster adds to a commit: the
// same batches of creates run by one store value, one batch at a time,
// and by three store values on the same database at once (three nodes'
// writers), reporting the server's CPU per batch (server-µs/batch) of
// the database's backends. docs/benchmarks/several-nodes.md.
func BenchmarkConcurrentBatches(b *testing.B) {
	first := openForPlans(b, thousandProducts...)
	url := first.cfg.URL
	stores := []*Store{first}
	for range 2 {
		s, err := Open(context.Background(), Config{URL: url, MaxConns: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	for _, tc := range []struct{ stores, n int }{{1, 13}, {3, 13}, {1, 27}} {
		b.Run(fmt.Sprintf("stores=%d,creates=%d", tc.stores, tc.n), func(b *testing.B) {
			runs := make([]func(int), tc.stores)
			for k := range runs {
				runs[k] = createBatches(b, stores[k], tc.n)
				for i := range 20 { // every statement prepared and its plan settled
					runs[k](i*3 + k)
				}
			}
			server := -backendNanos(b, first)
			b.ResetTimer()
			var wg sync.WaitGroup
			for k := range runs {
				wg.Go(func() {
					for i := k; i < b.N; i += tc.stores {
						runs[k](i)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if server += backendNanos(b, first); server > 0 {
				b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/batch")
			}
		})
	}
}
