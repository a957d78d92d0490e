package gotimer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/gotimer"
)

// benchTimers is the population of the memory benchmark, as in
// timingwheel's BenchmarkMemoryPerTimer.
const benchTimers = 1_000_000

// memoryHelperEnv, when set, makes TestMemoryHelper print the measurement.
// It runs in a fresh process because stopped runtime timers linger in the
// runtime's timer heaps until it gets round to cleaning them, which skews a
// later measurement in the same process (see timingwheel's benchmark).
const memoryHelperEnv = "GOTIMER_MEMORY_HELPER"

// BenchmarkMemoryPerTimer reports the heap memory held per pending timer by
// a Scheduler holding a million timers due in the next ten minutes,
// scheduled in batches of 10,000 as the engine's loader does, measured with
// runtime.MemStats after a GC in a fresh process. It counts everything a
// timer costs: the runtime timer, the callback's closure, the entry and the
// map slot.
func BenchmarkMemoryPerTimer(b *testing.B) {
	var perTimer float64
	for range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), memoryHelperEnv+"=1")
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("helper process: %v\n%s", err, out)
		}
		found := false
		for line := range strings.Lines(string(out)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "bytes/timer="); ok {
				if perTimer, err = strconv.ParseFloat(v, 64); err != nil {
					b.Fatalf("helper process: %v", err)
				}
				found = true
			}
		}
		if !found {
			b.Fatalf("helper process printed no measurement:\n%s", out)
		}
	}
	b.ReportMetric(perTimer, "bytes/timer")
}

// TestMemoryHelper is not a test: BenchmarkMemoryPerTimer runs the test
// binary again with only this function.
func TestMemoryHelper(t *testing.T) {
	if os.Getenv(memoryHelperEnv) == "" {
		t.Skip("helper process for BenchmarkMemoryPerTimer")
	}
	fmt.Printf("bytes/timer=%g\n", measureBytes(benchTimers))
}

func measureBytes(n int) float64 {
	var before, after runtime.MemStats
	rng := rand.New(rand.NewPCG(42, 42))
	now := time.Now()
	batch := make([]hourglass.DueItem, 0, 10_000)
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := gotimer.New(gotimer.Config{})
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
	s.Close()
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}
