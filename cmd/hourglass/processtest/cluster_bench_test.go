package processtest

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/hourglasstest/nodes"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// BenchmarkCluster measures 1, 2 and 3 `serve` processes of the built
// binary on one new database (PostgreSQL, or MariaDB with
// HOURGLASS_TEST_STORE=mysql), on the same cores as the load:
//
//   - creates/s: b.N orders over 1,000 SKUs with a 10-minute timeout, from 64
//     keep-alive clients (closed loop) sent round-robin to the nodes;
//   - the burst: HOURGLASS_BENCH_BURST orders (default 20,000), created the
//     same way with timeouts putting every deadline at one instant; drain is
//     the last closed_at minus the first deadline, as stored, and closes/s
//     the burst over the drain;
//   - CPU seconds of each node (utime+stime from /proc over the creates and
//     the burst) and of the database server's processes (every process
//     named postgres or mariadbd, so run it on a quiet machine), and the
//     same over the creates alone, with the group commits they took
//     (commits: the nodes' hourglass_store_commit_writes_count), for the
//     CPU per order (docs/benchmarks/several-nodes.md); on PostgreSQL also
//     the CPU of the backends connected to the benchmark's database alone
//     (creates-db-backends-cpu-s), which other work on the same server
//     (another database's benchmark) does not count in.
//
// HOURGLASS_BENCH_BURST=0 leaves the burst out; HOURGLASS_BENCH_ARGS adds
// serve flags to every node (e.g. "--commit-gather 2ms").
//
// Run: go test -run '^$' -bench Cluster -benchtime 20000x -count 3 ./cmd/hourglass/
// (scripts/bench-cluster).
func BenchmarkCluster(b *testing.B) {
	kind := testenv.Store(b, store.KindPostgres)
	burst := 20000
	if v := os.Getenv("HOURGLASS_BENCH_BURST"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("HOURGLASS_BENCH_BURST: want a count (0: no burst), got %q", v)
		}
		burst = n
	}
	args := strings.Fields(os.Getenv("HOURGLASS_BENCH_ARGS"))
	bin := binary(b)
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			if b.N == 1 {
				// The testing package's first round, before the -benchtime
				// count: a cluster and a burst for one order measure nothing.
				return
			}
			var dbURL string
			switch kind {
			case store.KindPostgres:
				dbURL = pgtest.NewDatabase(b)
			case store.KindMySQL:
				dbURL = mytest.NewDatabase(b)
			default:
				b.Fatalf("HOURGLASS_TEST_STORE=%s is not a shared store", kind)
			}
			ctx := b.Context()
			c, err := nodes.Start(ctx, nodes.Config{Binary: bin, DatabaseURL: dbURL, LogDir: b.TempDir(), Args: args}, n)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.WaitBalanced(ctx, 30*time.Second); err != nil {
				b.Fatal(err)
			}
			var urls []string
			for _, nd := range c.Nodes() {
				urls = append(urls, nd.URL())
			}
			skus := make([]string, 1000)
			client := api.NewClient(urls[0], "", nil)
			for i := range skus {
				skus[i] = fmt.Sprintf("BENCH-%d", i)
				if _, err := client.PutProduct(ctx, skus[i], "bench", "physical", 1<<50); err != nil {
					b.Fatal(err)
				}
			}
			serverName := map[string]string{store.KindPostgres: "postgres", store.KindMySQL: "mariadbd"}[kind]
			backends := newBackendCPU(b, kind, dbURL)
			nodeCPU0, dbCPU0, commits0 := nodesCPU(b, c), serverCPU(serverName), commits(b, urls)
			backends.start()

			b.ResetTimer()
			start := time.Now()
			sendCreates(b, urls, skus, b.N, func() int64 { return 600000 })
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
			nodeCPUc, dbCPUc := nodesCPU(b, c), serverCPU(serverName)
			if cpu, ok := backends.since(); ok {
				b.ReportMetric(cpu, "creates-db-backends-cpu-s")
			}
			var createsCPU float64
			for i := range nodeCPUc {
				createsCPU += nodeCPUc[i] - nodeCPU0[i]
			}
			b.ReportMetric(createsCPU, "creates-node-cpu-s")
			b.ReportMetric(dbCPUc-dbCPU0, "creates-db-cpu-s")
			b.ReportMetric(commits(b, urls)-commits0, "creates-commits")
			if burst == 0 {
				return
			}

			// The burst: every deadline at one instant, far enough ahead
			// for the creates to finish at the rate just measured.
			rate := float64(b.N) / elapsed.Seconds()
			due := time.Now().Add(2*time.Second + time.Duration(2*float64(burst)/rate*float64(time.Second)))
			first := lastID(b, dbURL)
			sendCreates(b, urls, skus[:1], burst, func() int64 { return time.Until(due).Milliseconds() })
			if time.Now().After(due) {
				b.Fatalf("the burst's creates ended after its deadline")
			}
			drain, closed := waitBurstClosed(b, dbURL, first, time.Until(due)+2*time.Minute)
			b.ReportMetric(drain.Seconds(), "drain-s")
			b.ReportMetric(float64(closed)/drain.Seconds(), "closes/s")

			nodeCPU1, dbCPU1 := nodesCPU(b, c), serverCPU(serverName)
			var total float64
			for i := range nodeCPU1 {
				total += nodeCPU1[i] - nodeCPU0[i]
			}
			b.ReportMetric(total/float64(n), "node-cpu-s/node")
			b.ReportMetric(dbCPU1-dbCPU0, "db-cpu-s")
		})
	}
}

// commits returns the group commits of the nodes so far (the sum of their
// hourglass_store_commit_writes_count).
func commits(b *testing.B, urls []string) float64 {
	var total float64
	for _, u := range urls {
		v := metricLine(b, u, "hourglass_store_commit_writes_count")
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("%s/metrics: hourglass_store_commit_writes_count %q: %v", u, v, err)
		}
		total += n
	}
	return total
}

// sendCreates creates count orders for the SKUs in turn, from 64 clients,
// round-robin over the nodes' URLs, each with the timeout timeoutMs gives.
func sendCreates(b *testing.B, urls, skus []string, count int, timeoutMs func() int64) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 256
	hc := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= count || failed.Load() != nil {
					return
				}
				body := []byte(`{"user_id":"bench","items":[{"sku":"` + skus[i%len(skus)] + `","quantity":1}],"timeout_ms":` + strconv.FormatInt(timeoutMs(), 10) + `}`)
				resp, err := hc.Post(urls[i%len(urls)]+"/v1/orders", "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Store(err)
					return
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					failed.Store(fmt.Errorf("create: status %d: %s", resp.StatusCode, msg))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
}

// openStore opens the benchmark's database for reading orders.
func openStore(b *testing.B, dbURL string) hourglass.Database {
	db, err := store.Open(b.Context(), store.Options{URL: dbURL, Logger: slog.New(slog.DiscardHandler), MaxConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// lastID returns the highest order id so far.
func lastID(b *testing.B, dbURL string) int64 {
	db := openStore(b, dbURL)
	var last int64
	for {
		page, err := db.ListOrders(b.Context(), hourglass.OrderFilter{After: last, Limit: 1000, Now: time.Now()})
		if err != nil {
			b.Fatal(err)
		}
		if len(page) == 0 {
			return last
		}
		last = page[len(page)-1].ID
	}
}

// waitBurstClosed waits until every order after id first is closed and
// returns the last closed_at minus the first deadline, and how many closed.
func waitBurstClosed(b *testing.B, dbURL string, first int64, timeout time.Duration) (time.Duration, int) {
	db := openStore(b, dbURL)
	var (
		drain      time.Duration
		open, read int
	)
	// The wait's failure does not say how many are open: log it as the
	// benchmark ends.
	defer func() {
		if b.Failed() {
			b.Logf("%d of the burst's %d orders still open", open, read)
		}
	}()
	testenv.EventuallyEvery(b, timeout, 500*time.Millisecond, "every order of the burst closed", func() bool {
		var orders []hourglass.Order
		after := first
		for {
			page, err := db.ListOrders(b.Context(), hourglass.OrderFilter{After: after, Limit: 1000, Now: time.Now()})
			if err != nil {
				b.Fatal(err)
			}
			orders = append(orders, page...)
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].ID
		}
		var firstDeadline, lastClose time.Time
		open, read = 0, len(orders)
		for _, o := range orders {
			if o.Status != hourglass.StateClosed || o.ClosedAt.IsZero() {
				open++
				continue
			}
			if firstDeadline.IsZero() || o.Deadline.Before(firstDeadline) {
				firstDeadline = o.Deadline
			}
			if o.ClosedAt.After(lastClose) {
				lastClose = o.ClosedAt
			}
		}
		drain = lastClose.Sub(firstDeadline)
		return open == 0 && len(orders) > 0
	})
	return drain, read
}

// nodesCPU returns each node's CPU seconds so far.
func nodesCPU(b *testing.B, c *nodes.Cluster) []float64 {
	var out []float64
	for _, nd := range c.Nodes() {
		s, err := procCPU(nd.Pid())
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// serverCPU returns the CPU seconds so far of every process named name
// (the database server's backends included); 0 where /proc is absent.
func serverCPU(name string) float64 {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var total float64
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != name {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		if s, err := procCPU(pid); err == nil {
			total += s
		}
	}
	return total
}

// procCPU returns a process's utime+stime in seconds from /proc/<pid>/stat
// (clock ticks of 1/100 s, Linux's USER_HZ).
func procCPU(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	return (utime + stime) / 100, nil
}
