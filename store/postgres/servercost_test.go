package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// serverCPUPerCommit runs b.N transactions on one connection of s, each
// BEGIN, what queue adds for the i-th, and COMMIT in one pipelined round
// trip, with synchronous_commit set to syncCommit, and reports the server's
// CPU per transaction (backendNanos) as server-µs/commit.
func serverCPUPerCommit(b *testing.B, s *Store, syncCommit string, queue func(batch *pgx.Batch, i int)) {
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = "+syncCommit); err != nil {
		b.Fatal(err)
	}
	server := -backendNanos(b, s)
	b.ResetTimer()
	for i := range b.N {
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		queue(batch, i)
		batch.Queue("COMMIT")
		if err := conn.SendBatch(ctx, batch).Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if server += backendNanos(b, s); server > 0 {
		b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/commit")
	}
	if _, err := conn.Exec(ctx, "RESET synchronous_commit"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBareCommit measures what a transaction costs the server before
// any of the store's statements: BEGIN, a one-row upsert and COMMIT, with
// synchronous_commit on (the default, and what the store's batches pay)
// and off. Its server-µs/commit is the floor under every group commit's
// cost, so it says how much of a batch's cost (BenchmarkCluster, in
// cmd/hourglass) only fewer commits can save.
func BenchmarkBareCommit(b *testing.B) {
	s := openForPlans(b, `CREATE TABLE bare_commit (id bigint PRIMARY KEY, v bigint NOT NULL)`)
	for _, mode := range []string{"on", "off"} {
		b.Run("synchronous_commit="+mode, func(b *testing.B) {
			serverCPUPerCommit(b, s, mode, func(batch *pgx.Batch, i int) {
				batch.Queue(`INSERT INTO bare_commit AS t VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET v = t.v + 1`, int64(i%1000))
			})
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
	s := openForPlans(b, thousandProducts...)
	const restriction = " AND p.sku = ANY((SELECT $1::text[])::text[])"
	if !strings.HasSuffix(productsUpdateSQL, restriction) {
		b.Fatal("productsUpdateSQL no longer ends with its restriction to the batch's SKUs: update this benchmark")
	}
	for _, n := range []int{8, 28} {
		for _, sql := range []struct{ name, sql string }{
			{"productsUpdateSQL", productsUpdateSQL},
			{"join-alone", strings.TrimSuffix(productsUpdateSQL, restriction)},
		} {
			b.Run(fmt.Sprintf("skus=%d/%s", n, sql.name), func(b *testing.B) {
				skus, delta := make([]string, n), make([]int64, n) // a delta of 0: the rows stay as they are
				serverCPUPerCommit(b, s, "off", func(batch *pgx.Batch, i int) {
					for j := range skus { // n SKUs spread over the table, sorted, another set each time
						skus[j] = fmt.Sprintf("sku-%05d", 1+(i+j*1000/n)%1000)
					}
					slices.Sort(skus)
					batch.Queue(sql.sql, slices.Clone(skus), delta, delta, delta)
				})
			})
		}
	}
}

// BenchmarkTxShape measures what a transaction's shape costs the server
// beside its statements' work, each transaction writing one row durably
// (synchronous_commit on): a round trip and a trivial statement, each on
// top of a bare commit. A group commit's fixed cost is its round trips and
// statements at these prices, plus what its statements do.
func BenchmarkTxShape(b *testing.B) {
	s := openForPlans(b, `CREATE TABLE bare_commit (id bigint PRIMARY KEY, v bigint NOT NULL)`)
	const upsert = `INSERT INTO bare_commit AS t VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET v = t.v + 1`
	for _, shape := range []struct {
		name string
		// pipelines are sent one after another, each one round trip;
		// "upsert" takes the row's id.
		pipelines [][]string
	}{
		{"autocommit", [][]string{{upsert}}},
		{"begin+commit", [][]string{{"BEGIN", upsert, "COMMIT"}}},
		{"begin+select+commit", [][]string{{"BEGIN", "SELECT 1", upsert, "COMMIT"}}},
		{"two-round-trips", [][]string{{"BEGIN", "SELECT 1"}, {upsert, "COMMIT"}}},
	} {
		b.Run(shape.name, func(b *testing.B) {
			ctx := context.Background()
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			run := func(i int) {
				for _, p := range shape.pipelines {
					batch := &pgx.Batch{}
					for _, sql := range p {
						if sql == upsert {
							batch.Queue(sql, int64(i%1000))
						} else {
							batch.Queue(sql)
						}
					}
					if err := conn.SendBatch(ctx, batch).Close(); err != nil {
						b.Fatal(err)
					}
				}
			}
			for i := range 20 { // prepared, plans settled
				run(i)
			}
			server := -backendNanos(b, s)
			b.ResetTimer()
			for i := range b.N {
				run(i)
			}
			b.StopTimer()
			if server += backendNanos(b, s); server > 0 {
				b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/tx")
			}
		})
	}
}
