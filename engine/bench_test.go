package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// BenchmarkCloseLateness drives the whole close path at a constant rate:
// orders are created through the store at `rate`/s with a 1 s timeout (the
// shortest allowed) for 5 s, so after the first second closes run at the
// same rate while creates continue on the same single writer. It reports
// close lateness (closed_at − deadline) percentiles over all orders. Run it
// with -benchtime 1x: each iteration is one whole 6-second scenario.
func BenchmarkCloseLateness(b *testing.B) {
	for _, rate := range []int{500, 2000, 4000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			for range b.N {
				lateness := closeLatenessScenario(b, rate, 5*time.Second)
				slices.Sort(lateness)
				pct := func(p float64) float64 {
					return float64(lateness[min(len(lateness)-1, int(p*float64(len(lateness))))]) / float64(time.Millisecond)
				}
				b.ReportMetric(pct(0.50), "p50-ms")
				b.ReportMetric(pct(0.99), "p99-ms")
				b.ReportMetric(pct(0.999), "p99.9-ms")
				b.ReportMetric(float64(lateness[len(lateness)-1])/float64(time.Millisecond), "max-ms")
				b.ReportMetric(float64(len(lateness)), "closes")
			}
		})
	}
}

func closeLatenessScenario(b *testing.B, rate int, d time.Duration) []time.Duration {
	b.Helper()
	f := setup(b, hourglass.SystemClock{})
	e := f.engine(b, Config{})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-e.firstPage // the horizon is up: Schedule takes the orders
	// Open loop: every 5 ms a burst of rate/200 creates, each on its own
	// goroutine, so a slow commit does not slow the arrival rate.
	const tick = 5 * time.Millisecond
	perTick := rate / int(time.Second/tick)
	var wg sync.WaitGroup
	total := 0
	t := time.NewTicker(tick)
	end := time.Now().Add(d)
	for now := range t.C {
		if now.After(end) {
			break
		}
		for range perTick {
			total++
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := f.create(b, time.Second)
				e.Schedule(hourglass.DueItem{ID: o.ID, At: o.Deadline})
			}()
		}
	}
	t.Stop()
	wg.Wait()
	waitClosed(b, f.rec, total)
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	out := make([]time.Duration, 0, len(f.rec.closed))
	for _, c := range f.rec.closed {
		out = append(out, c.ClosedAt.Sub(c.Deadline))
	}
	if f.rec.swept != 0 {
		b.Errorf("the sweeper closed %d orders: the wheel missed them", f.rec.swept)
	}
	return out
}

// BenchmarkBurst closes a flash sale's backlog through the whole close path
// (first load, wheel, dispatcher, SQLite) and reports closes per second:
// n orders (HOURGLASS_BENCH_BURST, default 50,000) all due at one instant,
// with the fake clock standing at that instant while they close. It is the
// in-process twin of cmd/hourglass's BenchmarkCloseBurst, for -cpuprofile.
func BenchmarkBurst(b *testing.B) {
	n := testenv.PositiveInt(b, "HOURGLASS_BENCH_BURST", 50_000)
	for range b.N {
		b.StopTimer()
		clock := hourglasstest.NewClock(hourglasstest.Epoch)
		f := setup(b, clock)
		createN(b, f, n, 10*time.Second)
		clock.Advance(10 * time.Second)
		e := f.engine(b, Config{})
		ctx, cancel := context.WithCancel(f.ctx)
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { done <- e.Run(ctx) }()
		waitClosed(b, f.rec, n)
		elapsed := time.Since(start)
		b.StopTimer()
		cancel()
		<-done
		_, swept, _ := f.rec.counts()
		b.ReportMetric(float64(n)/elapsed.Seconds(), "closes/s")
		b.ReportMetric(float64(swept), "swept")
		b.ReportMetric(float64(f.rec.staleCount()), "noops")
	}
}
