package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// BenchmarkBareCommit measures what a transaction costs the server before
// any of the store's statements: BEGIN, a one-row upsert and COMMIT in one
// pipelined round trip, one connection, with synchronous_commit on (the
// default, and what the store's batches pay) and off. Its
// server-µs/commit is the floor under every group commit's cost, so it
// says how much of a batch's cost (BenchmarkCluster, in cmd/hourglass)
// only fewer commits can save.
func BenchmarkBareCommit(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: pgtest.NewDatabase(b), MaxConns: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.pool.Exec(ctx, `CREATE TABLE bare_commit (id bigint PRIMARY KEY, v bigint NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"on", "off"} {
		b.Run("synchronous_commit="+mode, func(b *testing.B) {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "SET synchronous_commit = "+mode); err != nil {
				b.Fatal(err)
			}
			server := -backendCPU(b, s)
			b.ResetTimer()
			for i := range b.N {
				batch := &pgx.Batch{}
				batch.Queue("BEGIN")
				batch.Queue(`INSERT INTO bare_commit AS t VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET v = t.v + 1`, int64(i%1000))
				batch.Queue("COMMIT")
				if err := conn.SendBatch(ctx, batch).Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if server += backendCPU(b, s); server > 0 {
				b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/commit")
			}
			if _, err := conn.Exec(ctx, "RESET synchronous_commit"); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkProductsUpdate measures a batch's stock UPDATE on 1,000 products
// as the writer runs it (productsUpdateSQL) and as it was before, its join
// alone: what the planner's hash join over every product cost the server
// per commit. Each transaction is BEGIN, the UPDATE and COMMIT, with
// synchronous_commit off so that the flush's cost does not drown the
// difference.
func BenchmarkProductsUpdate(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: pgtest.NewDatabase(b), MaxConns: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const products = 1000
	if _, err := s.pool.Exec(ctx, `INSERT INTO products (sku, name, category, available)
SELECT 'sku-' || lpad(g::text, 5, '0'), 'n', 'c', 1000000000 FROM generate_series(1, $1::int) g`, products); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE products`); err != nil {
		b.Fatal(err)
	}
	const restriction = " AND p.sku = ANY($1::text[])"
	if !strings.HasSuffix(productsUpdateSQL, restriction) {
		b.Fatal("productsUpdateSQL no longer ends with its restriction to the batch's SKUs: update this benchmark")
	}
	for _, n := range []int{8, 28} {
		for _, sql := range []struct{ name, sql string }{
			{"productsUpdateSQL", productsUpdateSQL},
			{"join-alone", strings.TrimSuffix(productsUpdateSQL, restriction)},
		} {
			b.Run(fmt.Sprintf("skus=%d/%s", n, sql.name), func(b *testing.B) {
				conn, err := s.pool.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Release()
				if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
					b.Fatal(err)
				}
				defer conn.Exec(ctx, "RESET synchronous_commit")
				skus, delta := make([]string, n), make([]int64, n)
				server := -backendCPU(b, s)
				b.ResetTimer()
				for i := range b.N {
					for j := range skus { // n SKUs spread over the table, sorted, another set each time
						skus[j] = fmt.Sprintf("sku-%05d", 1+(i+j*products/n)%products)
					}
					slices.Sort(skus)
					batch := &pgx.Batch{}
					batch.Queue("BEGIN")
					batch.Queue(sql.sql, skus, delta, delta, delta)
					batch.Queue("COMMIT")
					if err := conn.SendBatch(ctx, batch).Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if server += backendCPU(b, s); server > 0 {
					b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/commit")
				}
			})
		}
	}
}
