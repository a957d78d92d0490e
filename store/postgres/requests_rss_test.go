package postgres_test

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/requests"
)

// TestManyTimerRequestsRSS: pending timer requests apply with the
// process's RSS bounded, however many are waiting: HOURGLASS_TIMER_REQUESTS
// of them (CI: 20,000; docs/benchmarks/timers.md records a million), one in
// a thousand with a 100 KB payload rejected by its size, applied by the
// node's applier (package requests, batches of 500) until none is left.
// RSS is sampled from /proc/self/status every 50 ms; the peak must stay
// under 300 MB.
func TestManyTimerRequestsRSS(t *testing.T) {
	t.Parallel()
	n := 20_000
	if v := os.Getenv("HOURGLASS_TIMER_REQUESTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("HOURGLASS_TIMER_REQUESTS=%q: want a positive count", v)
		}
	}
	url, db := shopDatabase(t)
	s := openSchema(t, url, "hourglass")
	start := time.Now()
	if _, err := db.ExecContext(t.Context(), `INSERT INTO hourglass.timer_requests (timer_key, delay_ms, payload)
SELECT 'many-' || g, 3600000, CASE WHEN g % 1000 = 0 THEN '{"a":"' || repeat('x', 100000) || '"}' ELSE '{"n":' || g || '}' END
FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests written in %s", n, time.Since(start).Round(time.Millisecond))
	base := rss(t)
	peak := base
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	a, err := requests.New(requests.Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	start = time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for left := int64(-1); left != 0; {
		<-tick.C
		peak = max(peak, rss(t))
		if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM (SELECT 1 FROM hourglass.timer_requests LIMIT 1) r`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 30*time.Minute {
			t.Fatal("the requests were not applied within 30 minutes")
		}
	}
	took := time.Since(start)
	stop()
	<-done
	rejected, err := s.RejectedTimerRequestCount(t.Context())
	if err != nil || rejected != int64(n/1000) {
		t.Fatalf("rejected %d, %v; want %d (the 100 KB payloads)", rejected, err, n/1000)
	}
	counts, err := s.TimerCounts(t.Context())
	if err != nil || counts[hourglass.TimerScheduled] != int64(n-n/1000) {
		t.Fatalf("scheduled timers %v, %v; want %d", counts, err, n-n/1000)
	}
	t.Logf("%d requests applied in %s (%.0f/s); RSS %d MB before, peak %d MB", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), base>>20, peak>>20)
	if peak > 300<<20 {
		t.Fatalf("RSS peaked at %d MB; want under 300 MB", peak>>20)
	}
}

// rss returns the process's resident set size (VmRSS), in bytes.
func rss(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
