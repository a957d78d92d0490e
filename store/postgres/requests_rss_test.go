package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
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
	n := testenv.PositiveInt(t, "HOURGLASS_TIMER_REQUESTS", 20_000)
	url, db := shopDatabase(t)
	s := openSchema(t, url, "hourglass")
	start := time.Now()
	if _, err := db.ExecContext(t.Context(), `INSERT INTO hourglass.timer_requests (timer_key, delay_ms, payload)
SELECT 'many-' || g, 3600000, CASE WHEN g % 1000 = 0 THEN '{"a":"' || repeat('x', 100000) || '"}' ELSE '{"n":' || g || '}' END
FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests written in %s", n, time.Since(start).Round(time.Millisecond))
	base := testenv.RSS(t)
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
		peak = max(peak, testenv.RSS(t))
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
