package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/store/sqlite"
)

// BenchmarkHTTPCreateOrders measures durable order creations per second
// through the HTTP API of the built binary, with 64 concurrent keep-alive
// clients in this process. Client and server share the machine's cores.
func BenchmarkHTTPCreateOrders(b *testing.B) {
	dir := b.TempDir()
	p := startHourglass(b, "bench", buildBinary(b, dir), filepath.Join(dir, "data"))
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 256
	hc := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	client := api.NewClient(p.url, "", hc)
	if _, err := client.PutProduct(context.Background(), "BENCH-1", "bench", "physical", 1<<50); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"user_id":"bench","items":[{"sku":"BENCH-1","quantity":1}],"timeout_ms":600000}`)
	b.SetParallelism(32) // 64 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := hc.Post(p.url+"/v1/orders", "application/json", bytes.NewReader(body))
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
	n := 1_000_000
	if v := os.Getenv("HOURGLASS_BENCH_PENDING"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("HOURGLASS_BENCH_PENDING: %v", err)
		}
	}
	dir := b.TempDir()
	bin := buildBinary(b, dir)
	dataDir := filepath.Join(dir, "data")
	seedPending(b, dataDir, n)
	b.ResetTimer()
	for range b.N {
		p := startHourglass(b, "restart", bin, dataDir)
		ready := p.readyAt.Sub(p.startedAt)
		time.Sleep(2 * time.Second) // let the loader finish and the heap settle
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

func seedPending(b *testing.B, dataDir string, n int) {
	b.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(sqlite.Config{Dir: dataDir})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "SEED", Available: int64(n) * 2}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	const workers = 64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				timeout := time.Minute + time.Duration(i%29000)*60*time.Millisecond // 1..30 min
				if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "seed", Items: []hourglass.Item{{SKU: "SEED", Quantity: 1}}, Timeout: timeout}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
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
