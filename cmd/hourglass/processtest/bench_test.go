package processtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/sqlite"
	"github.com/hourglass/hourglass/store/storetest"
	zsqlite "zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// BenchmarkHTTPCreateOrders measures durable order creations per second
// through the HTTP API of the built binary, with 64 concurrent keep-alive
// clients in this process, on the store HOURGLASS_TEST_STORE names (SQLite
// by default): "skus" spreads orders over 1,000 SKUs, "hotsku" sends every
// order for one SKU (a flash sale). Client, server and database share the
// machine's cores.
func BenchmarkHTTPCreateOrders(b *testing.B) {
	bin := binary(b)
	for _, tc := range []struct {
		name string
		skus int
	}{{"skus", 1000}, {"hotsku", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			p := startHourglass(b, "bench", bin, filepath.Join(b.TempDir(), "data"), "--database-url", storetest.URL(b))
			cpu0, err := procCPU(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			benchmarkCreates(b, p.url, tc.skus)
			// The server's CPU per order (its utime+stime, the seeding of
			// the products included): what a create costs the service
			// whatever else the machine runs. Compare runs of one
			// -benchtime: the seeding weighs more in a short one.
			if cpu, err := procCPU(p.cmd.Process.Pid); err == nil {
				b.ReportMetric((cpu-cpu0)*1e6/float64(b.N), "server-cpu-us/order")
			}
			p.cmd.Process.Kill()
			<-p.exited
		})
	}
	// The ceiling: a no-op net/http server (testdata/ceiling) that decodes
	// the same body and answers an order-shaped 201, driven by the same
	// client in the same run. hourglass's orders/s over the ceiling's is
	// what issue 40 judges (>= 0.6): "ratio" measures both, alternated.
	b.Run("ceiling", func(b *testing.B) {
		url, pid := startCeiling(b, "")
		cpu0, err := procCPU(pid)
		if err != nil {
			b.Fatal(err)
		}
		benchmarkCreates(b, url, 1000)
		if cpu, err := procCPU(pid); err == nil {
			b.ReportMetric((cpu-cpu0)*1e6/float64(b.N), "server-cpu-us/order")
		}
	})
	b.Run("ratio", benchmarkCeilingRatio)
}

// startCeiling builds and starts testdata/ceiling on a free loopback port
// and returns its URL and pid; it is killed when b ends. debugAddr, when
// set, serves its runtime profiles.
func startCeiling(b *testing.B, debugAddr string) (string, int) {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "ceiling")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/ceiling").CombinedOutput(); err != nil {
		b.Fatalf("go build testdata/ceiling: %v\n%s", err, out)
	}
	addr := freeAddr(b)
	cmd := exec.Command(bin, "-addr", addr, "-debug-addr", debugAddr)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "http://" + addr
	testenv.Eventually(b, 10*time.Second, "the ceiling server answers", func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return url, cmd.Process.Pid
}

func benchmarkCreates(b *testing.B, url string, skus int) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 256
	hc := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	client := api.NewClient(url, "", hc)
	bodies := make([][]byte, skus)
	for i := range skus {
		sku := fmt.Sprintf("BENCH-%d", i)
		if _, err := client.PutProduct(context.Background(), sku, "bench", "physical", 1<<50); err != nil {
			b.Fatal(err)
		}
		bodies[i] = []byte(`{"user_id":"bench","items":[{"sku":"` + sku + `","quantity":1}],"timeout_ms":600000}`)
	}
	var next atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := bodies[int(next.Add(1))%skus]
			resp, err := hc.Post(url+"/v1/orders", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
}

// BenchmarkRestartPending seeds a database with pending orders (1,000,000 by
// default, HOURGLASS_BENCH_PENDING to change) whose deadlines are spread
// uniformly over the next 1 to 30 minutes, as a shop with the default 30-min
// timeout has at any instant, then starts the binary on it and reports the
// time from exec to /readyz 200, the process's RSS once the first window is
// loaded, and how many timers that window holds. Run with -benchtime 1x.
func BenchmarkRestartPending(b *testing.B) {
	n := testenv.PositiveInt(b, "HOURGLASS_BENCH_PENDING", 1_000_000)
	dir := b.TempDir()
	bin := binary(b)
	dataDir := filepath.Join(dir, "data")
	// Due 1 to 30 minutes after the restart, as a shop with the default
	// 30-min timeout has at any instant.
	seedPending(b, dataDir, n, time.Now().Add(time.Minute), 29*time.Minute)
	b.ResetTimer()
	for range b.N {
		p := startHourglass(b, "restart", bin, dataDir)
		ready := p.readyAt.Sub(p.startedAt)
		// The process's memory 2 s after ready is the measure: the loader
		// finishes and the heap settles meanwhile, with no signal for either.
		testenv.Phase(b, 2*time.Second, "the first window loads and the heap settles")
		rss, hwm := procMemory(b, p.cmd.Process.Pid)
		b.ReportMetric(float64(ready.Milliseconds()), "ready-ms")
		b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
		b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MB")
		b.ReportMetric(scrapeGauge(b, p.url, "hourglass_timers_pending"), "wheel-timers")
		b.ReportMetric(float64(n), "pending-orders")
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// seedPending writes n pending orders for one SKU straight into the SQLite
// file (the store creates the schema; one INSERT … SELECT over a counter
// then fills it: seconds per million, where n CreateOrder calls took 24
// minutes for 10 million). Order i falls due at from + (i % spreadMs) ms,
// all within [from, from+spread).
func seedPending(b *testing.B, dataDir string, n int, from time.Time, spread time.Duration) {
	b.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(sqlite.Config{Dir: dataDir})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "SEED", Name: "seed", Category: "physical", Available: int64(n) * 2}); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	conn, err := zsqlite.OpenConn(filepath.Join(dataDir, sqlite.FileNameDefault), zsqlite.OpenReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	now := time.Now().UnixMilli()
	// ExecuteScript runs the script in one transaction.
	err = sqlitex.ExecuteScript(conn, `WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < $n - 1)
INSERT INTO orders (user_id, status, items, created_at, deadline)
SELECT 'seed', 'pending_payment', '[{"sku":"SEED","quantity":1}]', $now, $from + i % $spread FROM k;
UPDATE products SET available = available - $n, reserved = reserved + $n WHERE sku = 'SEED';`, &sqlitex.ExecOptions{Named: map[string]any{
		"$n": n, "$now": now, "$from": from.UnixMilli(), "$spread": max(spread.Milliseconds(), 1)}})
	if err == nil {
		err = sqlitex.ExecuteTransient(conn, "PRAGMA wal_checkpoint(TRUNCATE)", nil)
	}
	if err != nil {
		b.Fatal(err)
	}
}

// procMemory returns VmRSS and VmHWM of pid in bytes.
func procMemory(b *testing.B, pid int) (rss, hwm int64) {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

func scrapeGauge(b *testing.B, url, name string) float64 {
	b.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	b.Fatalf("metric %s not found", name)
	return 0
}

// BenchmarkRestartOverdue seeds a database with pending orders all past
// their deadline (1,000,000 by default, HOURGLASS_BENCH_OVERDUE to change),
// due over the last minute, as after an outage, then starts the binary on
// it and reports the time from exec to /readyz 200, the time until every
// one is closed, and how many the sweeper took. Run with -benchtime 1x.
func BenchmarkRestartOverdue(b *testing.B) {
	n := testenv.PositiveInt(b, "HOURGLASS_BENCH_OVERDUE", 1_000_000)
	dir := b.TempDir()
	bin := binary(b)
	dataDir := filepath.Join(dir, "data")
	seedPending(b, dataDir, n, time.Now().Add(-time.Minute), time.Minute)
	b.ResetTimer()
	for range b.N {
		p := startHourglass(b, "overdue", bin, dataDir)
		ready := p.readyAt.Sub(p.startedAt)
		testenv.EventuallyEvery(b, time.Until(p.startedAt.Add(10*time.Minute)), 50*time.Millisecond, fmt.Sprintf("all %d overdue orders closed 10 minutes after start", n), func() bool {
			return scrapeCounterSum(b, p.url, "hourglass_orders_closed_total") >= float64(n)
		})
		drained := time.Since(p.startedAt)
		rss, hwm := procMemory(b, p.cmd.Process.Pid)
		b.ReportMetric(float64(ready.Milliseconds()), "ready-ms")
		b.ReportMetric(float64(drained.Milliseconds()), "drained-ms")
		b.ReportMetric(float64(n)/(drained-ready).Seconds(), "closes/s")
		b.ReportMetric(scrapeLabeled(b, p.url, "hourglass_orders_closed_total", `by="sweeper"`), "swept")
		b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
		b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MB")
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// BenchmarkCloseBurst measures a flash sale's mass expiry on the store
// HOURGLASS_TEST_STORE names: it creates HOURGLASS_BENCH_BURST orders
// (default 100,000) for one SKU through the HTTP API of the built binary,
// each with the timeout that puts its deadline at one instant T, then waits
// until every one is closed. It reports the drain time (the latest
// closed_at − T), lateness percentiles over all orders, and how many the
// sweeper took. Run with -benchtime 1x.
func BenchmarkCloseBurst(b *testing.B) {
	n := 100_000
	if v := os.Getenv("HOURGLASS_BENCH_BURST"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("HOURGLASS_BENCH_BURST=%q: want a positive integer", v)
		}
	}
	bin := binary(b)
	for range b.N {
		p := startHourglass(b, "burst", bin, filepath.Join(b.TempDir(), "data"), "--database-url", storetest.URL(b))
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.MaxIdleConnsPerHost = 256
		hc := &http.Client{Transport: transport, Timeout: 60 * time.Second}
		client := api.NewClient(p.url, "", hc)
		ctx := context.Background()
		if _, err := client.PutProduct(ctx, "BURST", "burst", "physical", int64(n)); err != nil {
			b.Fatal(err)
		}
		// The instant every order falls due: far enough ahead that seeding
		// at 3,000/s (below every store's rate here) ends before it.
		due := time.Now().Add(10*time.Second + time.Duration(n)*time.Second/3000).Truncate(time.Second)
		var (
			wg      sync.WaitGroup
			created atomic.Int64
		)
		for w := range 64 {
			wg.Go(func() {
				for i := w; i < n; i += 64 {
					timeout := time.Until(due).Milliseconds()
					body := fmt.Sprintf(`{"user_id":"burst","items":[{"sku":"BURST","quantity":1}],"timeout_ms":%d}`, timeout)
					resp, err := hc.Post(p.url+"/v1/orders", "application/json", strings.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						b.Errorf("create: status %d", resp.StatusCode)
						return
					}
					created.Add(1)
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			return
		}
		seeded := time.Now()
		if !seeded.Before(due) {
			b.Fatalf("seeding %d orders ended %s after their deadline; the store created fewer than 3,000/s", n, seeded.Sub(due))
		}
		var closed float64
		func() {
			// The wait's failure does not say how many closed: log it as
			// the benchmark ends.
			defer func() {
				if b.Failed() {
					b.Logf("only %.0f of %d orders closed", closed, n)
				}
			}()
			testenv.EventuallyEvery(b, time.Until(due.Add(5*time.Minute)), 50*time.Millisecond, fmt.Sprintf("all %d orders closed 5 minutes after their deadline", n), func() bool {
				closed = scrapeCounterSum(b, p.url, "hourglass_orders_closed_total")
				return closed >= float64(n)
			})
		}()
		orders := listAll(b, client)
		late := make([]time.Duration, 0, len(orders))
		for _, o := range orders {
			if o.Status != "closed" || o.ClosedAt == nil {
				b.Fatalf("order %d is %s, want closed", o.ID, o.Status)
			}
			closedAt, err := time.Parse(time.RFC3339Nano, *o.ClosedAt)
			deadline, err2 := time.Parse(time.RFC3339Nano, o.Deadline)
			if err != nil || err2 != nil {
				b.Fatalf("order %d: bad times %q %q", o.ID, *o.ClosedAt, o.Deadline)
			}
			if closedAt.Before(deadline) {
				b.Fatalf("order %d closed at %s, before its deadline %s", o.ID, *o.ClosedAt, o.Deadline)
			}
			late = append(late, closedAt.Sub(deadline))
		}
		slices.Sort(late)
		pct := func(q float64) float64 { return float64(late[int(q*float64(len(late)-1))].Milliseconds()) }
		b.ReportMetric(float64(n), "orders")
		b.ReportMetric(pct(0.5), "late-p50-ms")
		b.ReportMetric(pct(0.99), "late-p99-ms")
		b.ReportMetric(pct(1), "drain-ms")
		b.ReportMetric(float64(n)/max(late[len(late)-1].Seconds(), 0.001), "closes/s")
		b.ReportMetric(scrapeLabeled(b, p.url, "hourglass_orders_closed_total", `by="sweeper"`), "swept")
		b.ReportMetric(scrapeCounterSum(b, p.url, "hourglass_close_noops_total"), "noops")
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// scrapeCounterSum returns the sum of every series of a metric.
func scrapeCounterSum(b *testing.B, url, name string) float64 { return scrapeLabeled(b, url, name, "") }

// scrapeLabeled returns the sum of the series of metric name whose labels
// contain label (every series when label is empty); 0 when there is none.
func scrapeLabeled(b *testing.B, url, name, label string) float64 {
	b.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if label != "" && !strings.Contains(rest, label) {
			continue
		}
		f, _ := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		sum += f
	}
	return sum
}

// BenchmarkPendingTimersWindow shows that memory follows the timers due
// soon, not the timers pending (issue #12): it seeds a SQLite database with
// 1,000,000 scheduled timers due 1 hour to 30 days ahead
// (HOURGLASS_BENCH_PENDING_TIMERS to change) and 1,000 due 60 to 90 s ahead,
// runs the engine over it with its defaults (the wheel, a 2-minute window)
// and, once the first window load is done, fails unless the engine holds
// exactly the 1,000 due within its window. It reports the timers held and
// the live heap the engine and its window added. Not a timing: run it with
// -benchtime 1x.
func BenchmarkPendingTimersWindow(b *testing.B) {
	far := 1_000_000
	if v := os.Getenv("HOURGLASS_BENCH_PENDING_TIMERS"); v != "" {
		var err error
		if far, err = strconv.Atoi(v); err != nil {
			b.Fatalf("HOURGLASS_BENCH_PENDING_TIMERS: %v", err)
		}
	}
	const near = 1000
	dataDir := b.TempDir()
	now := time.Now()
	seedTimers(b, dataDir, 0, far, now.Add(time.Hour), 30*24*time.Hour-time.Hour)
	seedTimers(b, dataDir, far, near, now.Add(60*time.Second), 30*time.Second)
	for range b.N {
		store, err := sqlite.Open(sqlite.Config{Dir: dataDir})
		if err != nil {
			b.Fatal(err)
		}
		counts, err := store.TimerCounts(context.Background())
		if err != nil || counts[hourglass.TimerScheduled] != int64(far+near) {
			b.Fatalf("seeded %v (%v), want %d scheduled", counts, err, far+near)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		eng, err := engine.New(store, engine.Config{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- eng.Run(ctx) }()
		testenv.Eventually(b, 30*time.Second, "the first window load finished (the engine recovered)", eng.Recovered)
		held := eng.Pending()
		runtime.GC()
		runtime.ReadMemStats(&after)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if err := store.Close(); err != nil {
			b.Fatal(err)
		}
		if held != near {
			b.Fatalf("the engine holds %d timers, want the %d due within its window (of %d pending)", held, near, far+near)
		}
		b.ReportMetric(float64(far+near), "pending-timers")
		b.ReportMetric(float64(held), "held-timers")
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "heap-growth-MB")
	}
}

// seedTimers writes n scheduled timers (keys seed-<from>… , ids from
// TimerIDBase + first) straight into the SQLite file, as seedPending does
// orders: timer i fires at from + (i % spreadMs) ms.
func seedTimers(b *testing.B, dataDir string, first, n int, from time.Time, spread time.Duration) {
	b.Helper()
	s, err := sqlite.Open(sqlite.Config{Dir: dataDir}) // the schema
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	conn, err := zsqlite.OpenConn(filepath.Join(dataDir, sqlite.FileNameDefault), zsqlite.OpenReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	err = sqlitex.ExecuteScript(conn, `WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < $n - 1)
INSERT INTO timers (id, key, status, fire_at, request_hash, created_at, updated_at)
SELECT $base + $first + i, 'seed-' || ($first + i), 'scheduled', $from + i % $spread, x'', $now, $now FROM k;`, &sqlitex.ExecOptions{Named: map[string]any{
		"$n": n, "$first": first, "$base": hourglass.TimerIDBase, "$now": time.Now().UnixMilli(), "$from": from.UnixMilli(), "$spread": max(spread.Milliseconds(), 1)}})
	if err == nil {
		err = sqlitex.ExecuteTransient(conn, "PRAGMA wal_checkpoint(TRUNCATE)", nil)
	}
	if err != nil {
		b.Fatal(err)
	}
}
