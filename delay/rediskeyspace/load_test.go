package rediskeyspace_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/rediskeyspace"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestLatenessUnderLoad measures the mechanism's weakness at a steady
// population of keys with a TTL, as in production: timers are scheduled at
// Rate per second, each TTL ahead, for 2×TTL; the lateness of the second
// half (the steady state) is logged. Redis's active expiry stops sampling
// once fewer than 10% of the sampled keys are stale, so about a tenth of the
// keys with a TTL sit expired but not yet reported: by Little's law the
// mean lateness grows with the TTL. Set HOURGLASS_TEST_REDISKEYSPACE_LOAD=1
// (optionally _RATE and _TTL in seconds) to run it; it takes ~3×TTL.
func TestLatenessUnderLoad(t *testing.T) {
	if os.Getenv("HOURGLASS_TEST_REDISKEYSPACE_LOAD") != "1" {
		t.Skip("a long measurement; set HOURGLASS_TEST_REDISKEYSPACE_LOAD=1")
	}
	rate := testenv.PositiveInt(t, "HOURGLASS_TEST_REDISKEYSPACE_LOAD_RATE", 1000)
	ttl := time.Duration(testenv.PositiveInt(t, "HOURGLASS_TEST_REDISKEYSPACE_LOAD_TTL", 20)) * time.Second
	raw, c := setup(t)
	s := open(t, rediskeyspace.Config{URL: raw, Namespace: hourglasstest.Namespace(t)}, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	late := map[int64]time.Duration{}
	arrived := make(chan struct{}, 1) // a delivery came since the last look
	probes := make(chan int64, 1)
	go s.Run(ctx, func(_ context.Context, due []hourglass.DueItem) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, tm := range due {
			if tm.ID >= probeID {
				select {
				case probes <- tm.ID:
				default:
				}
				continue
			}
			if _, ok := late[tm.ID]; !ok {
				late[tm.ID] = now.Sub(tm.At)
			}
		}
		select {
		case arrived <- struct{}{}:
		default:
		}
		return nil
	})
	awaitSubscribed(t, s, probes)

	const tick = 100 * time.Millisecond
	perTick := rate / 10
	start := time.Now()
	var id int64
	var measured []int64
	for k := 0; time.Since(start) < 2*ttl; k++ {
		testenv.Until(ctx, start.Add(time.Duration(k)*tick))
		batch := make([]hourglass.DueItem, perTick)
		steady := time.Since(start) >= ttl
		for i := range batch {
			id++
			batch[i] = hourglass.DueItem{ID: id, At: time.Now().Add(ttl).Truncate(time.Millisecond)}
			if steady {
				measured = append(measured, id)
			}
		}
		if err := s.Schedule(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	limit := time.NewTimer(ttl + time.Minute)
	defer limit.Stop()
	var lat []time.Duration
	for waiting := true; waiting; {
		mu.Lock()
		lat = lat[:0]
		for _, id := range measured {
			if l, ok := late[id]; ok {
				lat = append(lat, l)
			}
		}
		mu.Unlock()
		if len(lat) == len(measured) {
			break
		}
		select {
		case <-arrived:
		case <-limit.C:
			waiting = false // report what came by the last look
		}
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	t.Logf("%d timers/s, TTL %s, %d keys pending: steady-state lateness of %d timers: mean %s p50 %s p99 %s max %s; %d never delivered",
		rate, ttl, rate*int(ttl/time.Second), len(lat), (sum / time.Duration(max(len(lat), 1))).Round(time.Millisecond),
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(measured)-len(lat))
}
