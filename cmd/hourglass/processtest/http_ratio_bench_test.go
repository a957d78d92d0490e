package processtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/storetest"
)

// createClients is how many keep-alive clients post orders at once.
const createClients = 64

// benchmarkCeilingRatio is BenchmarkHTTPCreateOrders/ratio: hourglass on
// the store HOURGLASS_TEST_STORE names and the no-op ceiling
// (testdata/ceiling), both started once and driven by the same 64 clients
// in turn, b.N creates each per round, HOURGLASS_BENCH_ROUNDS rounds (3 by
// default), the first of each round alternating. It reports the medians of
// both rates, of their per-round ratio (what issue 40 judges, >= 0.6), of
// each server's CPU per order and of the client's (this process's) CPU per
// order while it drove each, and hourglass's peak resident memory (VmHWM,
// the seeding and warm-up included): client and servers share the cores,
// so a server's rate also pays for its share of the client. Run with
// -benchtime Nx (20000x: about 2 s of hourglass a round).
//
// HOURGLASS_BENCH_BASELINE=path adds a third server to the rounds, the
// hourglass binary at path (an earlier build, on a database of its own),
// and reports its rate and ratio beside: a before and after in one run.
//
// HOURGLASS_BENCH_SERVER_PROFILE=dir also writes both servers' CPU
// profiles, taken over the first HOURGLASS_BENCH_PROFILE_SECONDS (30 by
// default) of the rounds, to dir/hourglass.pprof and dir/ceiling.pprof;
// each server idles while the other runs, which adds no samples.
func benchmarkCeilingRatio(b *testing.B) {
	rounds := testenv.PositiveInt(b, "HOURGLASS_BENCH_ROUNDS", 3)
	profileDir := os.Getenv("HOURGLASS_BENCH_SERVER_PROFILE")
	var hgDebug, ceilDebug string
	args := []string{"--database-url", storetest.URL(b)}
	if profileDir != "" {
		hgDebug, ceilDebug = freeAddr(b), freeAddr(b)
		args = append(args, "--debug-addr", hgDebug)
	}
	p := startHourglass(b, "bench", binary(b), filepath.Join(b.TempDir(), "data"), args...)
	ceilURL, ceilPID := startCeiling(b, ceilDebug)
	servers := []*createLoad{
		newCreateLoad(b, "hourglass", p.url, p.cmd.Process.Pid, 1000),
		newCreateLoad(b, "ceiling", ceilURL, ceilPID, 1000),
	}
	if baseline := os.Getenv("HOURGLASS_BENCH_BASELINE"); baseline != "" {
		bp := startHourglass(b, "baseline", baseline, filepath.Join(b.TempDir(), "baseline"), "--database-url", storetest.URL(b))
		servers = append(servers, newCreateLoad(b, "baseline", bp.url, bp.cmd.Process.Pid, 1000))
	}
	// Connections are opened and both servers' code paths warmed before
	// the clock starts.
	for _, s := range servers {
		s.run(b, 10*createClients)
	}
	var profiles sync.WaitGroup
	if profileDir != "" && b.N > 1 { // not the probe run of one order
		seconds := testenv.PositiveInt(b, "HOURGLASS_BENCH_PROFILE_SECONDS", 30)
		for _, pr := range []struct{ name, addr string }{{"hourglass", hgDebug}, {"ceiling", ceilDebug}} {
			profiles.Go(func() {
				if err := saveProfile(pr.addr, seconds, filepath.Join(profileDir, pr.name+".pprof")); err != nil {
					b.Error(err)
				}
			})
		}
	}
	rates := make([][]float64, len(servers))
	cpus := make([][]float64, len(servers))
	clientCPUs := make([][]float64, len(servers))
	var ratios, baseRatios []float64
	b.ResetTimer()
	for round := range rounds {
		rate := make([]float64, len(servers))
		for k := range servers {
			i := (k + round) % len(servers) // who goes first alternates
			r, cpu, clientCPU := servers[i].run(b, b.N)
			rate[i] = r
			rates[i] = append(rates[i], r)
			cpus[i] = append(cpus[i], cpu)
			clientCPUs[i] = append(clientCPUs[i], clientCPU)
		}
		ratios = append(ratios, rate[0]/rate[1])
		b.Logf("round %d: hourglass %.0f orders/s, ceiling %.0f orders/s, ratio %.3f", round+1, rate[0], rate[1], rate[0]/rate[1])
		if len(servers) > 2 {
			baseRatios = append(baseRatios, rate[2]/rate[1])
			b.Logf("round %d: baseline %.0f orders/s, ratio %.3f", round+1, rate[2], rate[2]/rate[1])
		}
	}
	b.StopTimer()
	profiles.Wait()
	peakRSS := make([]float64, len(servers))
	for i, s := range servers {
		mb, err := procPeakRSS(s.pid)
		if err != nil {
			b.Fatal(err)
		}
		peakRSS[i] = mb
	}
	b.ReportMetric(median(rates[0]), "orders/s")
	b.ReportMetric(median(rates[1]), "ceiling-orders/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(cpus[0]), "server-cpu-us/order")
	b.ReportMetric(median(cpus[1]), "ceiling-cpu-us/order")
	b.ReportMetric(median(clientCPUs[0]), "client-cpu-us/order")
	b.ReportMetric(median(clientCPUs[1]), "ceiling-client-cpu-us/order")
	b.ReportMetric(peakRSS[0], "server-peak-rss-MB")
	if len(servers) > 2 {
		b.ReportMetric(median(rates[2]), "baseline-orders/s")
		b.ReportMetric(median(baseRatios), "baseline-ratio")
		b.ReportMetric(median(cpus[2]), "baseline-cpu-us/order")
		b.ReportMetric(median(clientCPUs[2]), "baseline-client-cpu-us/order")
		b.ReportMetric(peakRSS[2], "baseline-peak-rss-MB")
	}
	b.ReportMetric(0, "ns/op") // rounds of two servers: ns/op means nothing
}

// createLoad posts one-item orders to one server, spread over its seeded
// SKUs, from createClients keep-alive clients.
type createLoad struct {
	name, url string
	pid       int
	hc        *http.Client
	bodies    [][]byte
	next      atomic.Int64
}

// newCreateLoad seeds skus products on the server at url (whose process
// is pid) and returns its load.
func newCreateLoad(b *testing.B, name, url string, pid, skus int) *createLoad {
	b.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 4 * createClients
	l := &createLoad{name: name, url: url, pid: pid, hc: &http.Client{Transport: transport, Timeout: 30 * time.Second}}
	client := api.NewClient(url, "", l.hc)
	for i := range skus {
		sku := fmt.Sprintf("BENCH-%d", i)
		if _, err := client.PutProduct(context.Background(), sku, "bench", "physical", 1<<50); err != nil {
			b.Fatalf("%s: seed %s: %v", name, sku, err)
		}
		l.bodies = append(l.bodies, []byte(`{"user_id":"bench","items":[{"sku":"`+sku+`","quantity":1}],"timeout_ms":600000}`))
	}
	return l
}

// run posts n orders and returns the rate (orders/s), the server's CPU
// (utime+stime) per order in µs and the client's (this process's).
func (l *createLoad) run(b *testing.B, n int) (rate, cpuPerOrder, clientPerOrder float64) {
	b.Helper()
	cpu0, err := procCPU(l.pid)
	if err != nil {
		b.Fatal(err)
	}
	client0, err := procCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for range createClients {
		// Labelled with the server's name, as are the connections' own
		// goroutines they dial (the first run, the warm-up, dials them):
		// the test's -cpuprofile tells the client's work for each server
		// apart (pprof -tagfocus server=ceiling).
		wg.Go(func() {
			pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("server", l.name)))
			for left.Add(-1) >= 0 {
				body := l.bodies[int(l.next.Add(1))%len(l.bodies)]
				resp, err := l.hc.Post(l.url+"/v1/orders", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Errorf("%s: %v", l.name, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("%s: status %d", l.name, resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu, err := procCPU(l.pid)
	if err != nil {
		b.Fatal(err)
	}
	client, err := procCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds(), (cpu - cpu0) * 1e6 / float64(n), (client - client0) * 1e6 / float64(n)
}

// procPeakRSS returns the peak resident memory (VmHWM) of process pid
// so far, in MB.
func procPeakRSS(pid int) (float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM %q", pid, rest)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// saveProfile fetches a CPU profile of seconds from the runtime profiles
// served on addr and writes it to path.
func saveProfile(addr string, seconds int, path string) error {
	hc := &http.Client{Timeout: time.Duration(seconds)*time.Second + time.Minute}
	resp, err := hc.Get("http://" + addr + "/debug/pprof/profile?seconds=" + strconv.Itoa(seconds))
	if err != nil {
		return fmt.Errorf("profile of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("profile of %s: %s: %s", addr, resp.Status, msg)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("profile of %s: %w", addr, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("profile of %s: %w", addr, err)
	}
	return nil
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// median returns the median of xs (the mean of the middle two for an even
// count); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
