package postgres

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// backendNanos returns the CPU time used so far by the server processes
// connected to s's database, from /proc/<pid>/schedstat (nanoseconds), or
// 0 when the server is not on this machine.
func backendNanos(tb testing.TB, s *Store) time.Duration {
	var total time.Duration
	for _, pid := range backendPIDs(tb, s) {
		ns, ok := pgtest.ProcessCPU(pid)
		if !ok {
			return 0
		}
		total += ns
	}
	return total
}

// BenchmarkCreateBatch runs batches of n creates (one item each, over
// 1,000 products) through the group commit's dialect, one batch at a time,
// and reports the server's CPU per batch (server-µs/batch): the fixed cost
// of a batch is its value at n=1, the per-create part its slope. The
// ",alone" runs are of a node alone in its cluster (it heartbeats, owns
// every lease and has read the cluster's state through the store), whose
// batches hold their announcements (quiet.go).
func BenchmarkCreateBatch(b *testing.B) {
	s := openForPlans(b, thousandProducts...)
	for _, tc := range []struct {
		n     int
		alone bool
	}{{1, false}, {8, false}, {32, false}, {1, true}, {8, true}} {
		name := fmt.Sprintf("creates=%d", tc.n)
		if tc.alone {
			name += ",alone"
		}
		b.Run(name, func(b *testing.B) {
			if tc.alone {
				makeAlone(b, s)
				defer s.quiet.leave()
			}
			run := createBatches(b, s, tc.n)
			for i := range 20 { // every statement prepared and its plan settled
				run(i)
			}
			report := statementProfile(b, s)
			server := -backendNanos(b, s)
			b.ResetTimer()
			for i := range b.N {
				run(i)
			}
			b.StopTimer()
			if server += backendNanos(b, s); server > 0 {
				b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/batch")
			}
			report()
		})
	}
}

// BenchmarkAnnounceCost prices the NOTIFY of a batch of n creates: its
// batches take turns, one announced, the next held as a lone node's are
// (quiet.go), so that both see the same load. It reports the CPU per batch
// of the writer's backends in each turn (announced-µs/batch,
// held-µs/batch) and of the listener's backend, which reads the announced
// batches' notices (listener-µs/announced).
func BenchmarkAnnounceCost(b *testing.B) {
	s := openForPlans(b, thousandProducts...)
	var listener int32
	if err := s.pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&listener); err != nil {
		b.Fatalf("the listener's backend: %v", err)
	}
	writers := func() time.Duration {
		var total time.Duration
		for _, pid := range backendPIDs(b, s) {
			if pid != listener {
				ns, _ := pgtest.ProcessCPU(pid)
				total += ns
			}
		}
		return total
	}
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("creates=%d", n), func(b *testing.B) {
			makeAlone(b, s)
			defer s.quiet.leave()
			run := createBatches(b, s, n)
			for i := range 20 {
				run(i)
			}
			var spent [2]time.Duration
			heard, _ := pgtest.ProcessCPU(listener)
			b.ResetTimer()
			for i := range 2 * b.N {
				turn := i % 2
				s.quiet.mu.Lock()
				s.quiet.alone, s.quiet.held = turn == 1, nil
				s.quiet.mu.Unlock()
				before := writers()
				run(i)
				spent[turn] += writers() - before
			}
			b.StopTimer()
			end, _ := pgtest.ProcessCPU(listener)
			if spent[0] > 0 {
				b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "announced-µs/batch")
				b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "held-µs/batch")
				b.ReportMetric(float64((end-heard).Microseconds())/float64(b.N), "listener-µs/announced")
			}
		})
	}
}

// createBatches returns a run of batch i of n creates through s's group
// commit dialect.
func createBatches(b *testing.B, s *Store, n int) func(i int) {
	ctx := context.Background()
	ops := make([]*batch.Op, n)
	return func(i int) {
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
}

// makeAlone makes s the store value of a node alone in its cluster, for a
// minute: it heartbeats, takes every lease and reads the cluster's state.
func makeAlone(tb testing.TB, s *Store) {
	tb.Helper()
	ctx := context.Background()
	const ttl = 4 * time.Minute // the quiet's answer is trusted for a minute
	if _, err := s.Heartbeat(ctx, hourglass.Node{ID: "bench", Addr: "bench:1"}); err != nil {
		tb.Fatal(err)
	}
	st, err := s.ClusterState(ctx, ttl)
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range st.Leases {
		if l.Owner == "bench" {
			continue
		}
		if _, ok, err := s.AcquireLease(ctx, "bench", l, false, ttl); err != nil || !ok {
			tb.Fatalf("acquire partition %d: %v, %v", l.Part, ok, err)
		}
	}
	if _, err := s.ClusterState(ctx, ttl); err != nil {
		tb.Fatal(err)
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

// BenchmarkCloseBatch closes batches of n orders (of no items) on a table
// of 100,000, its plans made on it, and reports the server's CPU per
// batch: a close batch's fixed cost is its value at n=1, the per-close
// part its slope.
func BenchmarkCloseBatch(b *testing.B) {
	for _, n := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("closes=%d", n), func(b *testing.B) { closeBatchGrown(b, false, 100000, n) })
	}
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
	report := statementProfile(b, s)
	server := -backendNanos(b, s)
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	if server += backendNanos(b, s); server > 0 {
		b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/batch")
	}
	report()
}

// BenchmarkMixedBatch runs batches of n creates and n closes together, as
// the group commit makes them when orders are created and others fall due
// at once (hourglass bench), and reports the server's CPU per batch. The
// orders closed are pending and due, one item each, made by SQL.
func BenchmarkMixedBatch(b *testing.B) {
	s := openForPlans(b, append(slices.Clone(thousandProducts),
		`UPDATE products SET reserved = 1000000`,
		`INSERT INTO orders (id, user_id, status, items, created_at, deadline)
SELECT g, 'u', 'pending_payment', '[{"sku":"sku-' || lpad((1 + g % 1000)::text, 5, '0') || '","quantity":1}]', 0, 0 FROM generate_series(1, 100000) g`,
		`SELECT setval(pg_get_serial_sequence('orders', 'id'), 100000)`)...)
	ctx := context.Background()
	next := int64(1)
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("creates=%d,closes=%d", n, n), func(b *testing.B) {
			ops := make([]*batch.Op, n+1)
			run := func(i int) {
				for j := range n {
					items := []hourglass.Item{{SKU: fmt.Sprintf("sku-%05d", 1+(i*n+j)%1000), Quantity: 1}}
					ops[j] = &batch.Op{Kind: batch.Create, Create: hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour, Items: items},
						Items: stored.EncodeItems(items)}
				}
				ids := make([]int64, n)
				for j := range ids {
					ids[j] = next
					next++
				}
				ops[n] = &batch.Op{Kind: batch.Close, IDs: ids}
				if _, err := (dialect{s}).Run(ctx, ops); err != nil {
					b.Fatal(err)
				}
				for _, o := range ops {
					if o.Res.Err != nil {
						b.Fatal(o.Res.Err)
					}
				}
				if got := len(ops[n].Res.Closed); got != n {
					b.Fatalf("closed %d of %d", got, n)
				}
			}
			for i := range 20 { // every statement prepared and its plan settled
				run(i)
			}
			report := statementProfile(b, s)
			server := -backendNanos(b, s)
			b.ResetTimer()
			for i := range b.N {
				run(i)
			}
			b.StopTimer()
			if server += backendNanos(b, s); server > 0 {
				b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/batch")
			}
			report()
		})
	}
}

// statementProfileEnv, when set to the server's log file (readable by
// the test), makes the batch benchmarks log where their server time went,
// statement by statement (statementProfile).
const statementProfileEnv = "HOURGLASS_BENCH_STATEMENTS_LOG"

// statementProfile, when statementProfileEnv names the server's log file,
// turns log_statement_stats on in the pool's sessions (a superuser's
// setting) and returns a function that reads the log written since and
// logs, per statement and protocol message (bind, execute), the backends'
// CPU (user + system) per batch of the b.N run. The server's
// log_line_prefix must hold [%p]. Otherwise it returns a function that does
// nothing. pg_stat_statements is not used: it needs the server to preload
// it.
func statementProfile(b *testing.B, s *Store) (report func()) {
	path := os.Getenv(statementProfileEnv)
	if path == "" || b.N < 10 { // not the run that sizes b.N
		return func() {}
	}
	ctx := context.Background()
	conns := s.pool.AcquireAllIdle(ctx)
	for _, c := range conns {
		if _, err := c.Exec(ctx, `SET log_statement_stats = on`); err != nil {
			b.Fatal(err)
		}
		c.Release()
	}
	pids := map[string]bool{}
	cpuAt := map[int32]time.Duration{}
	for _, pid := range backendPIDs(b, s) {
		pids[fmt.Sprintf("[%d]", pid)] = true
		cpuAt[pid], _ = pgtest.ProcessCPU(pid)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	from := fi.Size()
	return func() {
		// Each backend's share: the pool's and the listener's.
		rows, err := s.pool.Query(ctx, `SELECT pid, left(query, 40) FROM pg_stat_activity WHERE datname = current_database()`)
		if err != nil {
			b.Fatal(err)
		}
		var (
			pid  int32
			last string
		)
		if _, err := pgx.ForEachRow(rows, []any{&pid, &last}, func() error {
			if at, ok := cpuAt[pid]; ok {
				now, _ := pgtest.ProcessCPU(pid)
				b.Logf("backend %d: %.1f µs/batch (last statement: %s)", pid, float64((now-at).Nanoseconds())/1e3/float64(b.N), strings.Join(strings.Fields(last), " "))
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		for _, c := range s.pool.AcquireAllIdle(ctx) {
			if _, err := c.Exec(ctx, `RESET log_statement_stats`); err != nil {
				b.Fatal(err)
			}
			// The statements planned again at each execution.
			rows, err := c.Query(ctx, `SELECT generic_plans, custom_plans, left(regexp_replace(statement, '\s+', ' ', 'g'), 100)
FROM pg_prepared_statements WHERE custom_plans > 5 ORDER BY custom_plans DESC`, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				b.Fatal(err)
			}
			var (
				generic, custom int64
				sql             string
			)
			if _, err := pgx.ForEachRow(rows, []any{&generic, &custom, &sql}, func() error {
				b.Logf("connection %d: %d generic, %d custom plans: %s", c.Conn().PgConn().PID(), generic, custom, sql)
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			c.Release()
		}
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		raw, err := io.ReadAll(io.NewSectionReader(f, from, 1<<40))
		if err != nil {
			b.Fatal(err)
		}
		type key struct{ msg, sql string }
		cpu := map[key]float64{}
		count := map[key]int{}
		var total float64
		// A record: "… [pid] … LOG:  BIND MESSAGE STATISTICS", its DETAIL
		// "!	0.000012 s user, 0.000003 s system, …", then its STATEMENT.
		pending := map[string]key{} // pid → the message whose statement is next
		used := map[string]float64{}
		var lastPID string
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) > 3 && strings.HasPrefix(f[3], "[") {
				lastPID = f[3]
			}
			if !pids[lastPID] {
				continue
			}
			switch {
			case strings.Contains(line, "LOG:  ") && strings.HasSuffix(line, "MESSAGE STATISTICS"):
				msg := line[strings.Index(line, "LOG:  ")+6:]
				pending[lastPID] = key{msg: strings.TrimSuffix(msg, " MESSAGE STATISTICS")}
			case strings.Contains(line, " s user, "):
				var u, sys float64
				t := line[strings.Index(line, "!")+1:]
				if _, err := fmt.Sscanf(strings.TrimSpace(t), "%f s user, %f s system", &u, &sys); err == nil {
					used[lastPID] = (u + sys) * 1e6
				}
			case strings.Contains(line, "STATEMENT:  "):
				k, ok := pending[lastPID]
				if !ok {
					continue
				}
				delete(pending, lastPID)
				sql := strings.Join(strings.Fields(line[strings.Index(line, "STATEMENT:  ")+12:]), " ")
				k.sql = sql[:min(len(sql), 100)]
				cpu[k] += used[lastPID]
				count[k]++
				total += used[lastPID]
			}
		}
		keys := make([]key, 0, len(cpu))
		for k := range cpu {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, c key) int { return int(cpu[c] - cpu[a]) })
		n := float64(b.N)
		b.Logf("log_statement_stats: %.1f server-µs/batch in bind and execute messages", total/n)
		for _, k := range keys {
			b.Logf("%8.1f µs/batch %5.2f/batch  %-7s %s", cpu[k]/n, float64(count[k])/n, k.msg, k.sql)
		}
	}
}
