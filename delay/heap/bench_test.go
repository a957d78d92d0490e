package heap_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/heap"
)

// benchTimers is the population of the memory benchmark, as in
// timingwheel's BenchmarkMemoryPerTimer.
const benchTimers = 1_000_000

// BenchmarkMemoryPerTimer reports the heap memory held per pending timer by
// a Scheduler holding a million timers due in the next ten minutes,
// scheduled in batches of 10,000 as the engine's loader does, measured with
// runtime.MemStats after a GC. It includes the slack of the grown slice and
// map, as a running service would hold it.
func BenchmarkMemoryPerTimer(b *testing.B) {
	var perTimer float64
	for range b.N {
		perTimer = measureBytes(benchTimers)
	}
	b.ReportMetric(perTimer, "bytes/timer")
}

func measureBytes(n int) float64 {
	var before, after runtime.MemStats
	rng := rand.New(rand.NewPCG(42, 42))
	now := time.Now()
	batch := make([]hourglass.DueItem, 0, 10_000)
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := heap.New(heap.Config{})
	for i := range n {
		d := time.Minute + time.Duration(rng.Int64N(10*60*1000))*time.Millisecond
		batch = append(batch, hourglass.DueItem{ID: 1_000_000_000 + int64(i), At: now.Add(d).Truncate(time.Millisecond)})
		if len(batch) == cap(batch) || i == n-1 {
			s.Schedule(context.Background(), batch)
			batch = batch[:0]
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Pending() != n {
		panic("timers lost")
	}
	runtime.KeepAlive(s)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}
