package wheel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// benchTimers is the wheel's population in the benchmarks: the order
// service's working size.
const benchTimers = 1_000_000

// fill adds ids [first, first+n) to w with deadlines drawn uniformly from
// the span ms after w.Now().
func fill(w *Wheel, first uint64, n int, span int64, rng *rand.Rand) {
	now := w.Now()
	for id := first; id < first+uint64(n); id++ {
		w.Add(id, now+1+rng.Int64N(span))
	}
}

// randomDeadlines returns n deadlines in the ten minutes after now.
func randomDeadlines(now int64, n int, rng *rand.Rand) []int64 {
	d := make([]int64, n)
	for i := range d {
		d[i] = now + 1 + rng.Int64N(10*60*1000)
	}
	return d
}

// BenchmarkAdd adds timers to a wheel already holding a million. "new"
// adds fresh ids (every million ops the added ids are cancelled, untimed,
// so the wheel stays between one and two million, with its capacity
// already grown); "replace" moves existing ids to a new deadline.
func BenchmarkAdd(b *testing.B) {
	b.Run("new", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 1))
		w := New(unixMs)
		fill(w, 0, 2*benchTimers, 10*60*1000, rng)
		for id := uint64(benchTimers); id < 2*benchTimers; id++ {
			w.Cancel(id)
		}
		deadlines := randomDeadlines(unixMs, 1<<20, rng)
		next := uint64(benchTimers)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i > 0 && i%benchTimers == 0 {
				b.StopTimer()
				for id := next - benchTimers; id < next; id++ {
					w.Cancel(id)
				}
				b.StartTimer()
			}
			w.Add(next, deadlines[i&(1<<20-1)])
			next++
		}
	})
	b.Run("replace", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(2, 2))
		w := New(unixMs)
		fill(w, 0, benchTimers, 10*60*1000, rng)
		deadlines := randomDeadlines(unixMs, 1<<20, rng)
		ids := rng.Perm(benchTimers)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			w.Add(uint64(ids[i%benchTimers]), deadlines[i&(1<<20-1)])
		}
	})
}

// BenchmarkCancel cancels, in random order, the timers of a wheel holding a
// million; when all are gone it refills the wheel, untimed.
func BenchmarkCancel(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	w := New(unixMs)
	fill(w, 0, benchTimers, 10*60*1000, rng)
	ids := rng.Perm(benchTimers)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%benchTimers == 0 {
			b.StopTimer()
			fill(w, 0, benchTimers, 10*60*1000, rng)
			b.StartTimer()
		}
		if !w.Cancel(uint64(ids[i%benchTimers])) {
			b.Fatal("Cancel missed")
		}
	}
}

// BenchmarkAddCancel schedules and cancels a fresh id (an order created and
// then paid) in a wheel holding a million timers; one op is the pair.
func BenchmarkAddCancel(b *testing.B) {
	rng := rand.New(rand.NewPCG(4, 4))
	w := New(unixMs)
	fill(w, 0, benchTimers, 10*60*1000, rng)
	deadlines := randomDeadlines(unixMs, 1<<20, rng)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := uint64(benchTimers + i)
		w.Add(id, deadlines[i&(1<<20-1)])
		w.Cancel(id)
	}
}

// BenchmarkAdvance fires a million timers spread over 60 s. One op is the
// whole minute, so ns/op is per million; ns/fired is per timer. "1ms"
// advances one millisecond at a time (60000 calls), "jump" sleeps from
// NextDeadline to NextDeadline. Deadlines are random by default, the worst
// case for the cache since each slot's list is scattered over the slab;
// "ordered" adds them in deadline order, as orders created over time are.
func BenchmarkAdvance(b *testing.B) {
	const span = 60 * 1000
	for _, mode := range []struct {
		name          string
		jump, ordered bool
	}{
		{"1ms", false, false},
		{"jump", true, false},
		{"1ms-ordered", false, true},
	} {
		b.Run(mode.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 5))
			w := New(unixMs)
			total := 0
			discard := func(uint64, int64) {}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				start := w.Now()
				if mode.ordered {
					for id := range uint64(benchTimers) {
						w.Add(id, start+1+int64(id)*span/benchTimers)
					}
				} else {
					fill(w, 0, benchTimers, span, rng)
				}
				b.StartTimer()
				if mode.jump {
					for next, ok := w.NextDeadline(); ok; next, ok = w.NextDeadline() {
						total += w.Advance(next, discard)
					}
				} else {
					for now := start + 1; now <= start+span; now++ {
						total += w.Advance(now, discard)
					}
				}
			}
			if total != b.N*benchTimers {
				b.Fatalf("fired %d, want %d", total, b.N*benchTimers)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/fired")
		})
	}
}

// BenchmarkMemoryPerTimer reports the heap held per pending timer, for the
// wheel and for time.AfterFunc, each holding a million timers due in the
// next ten minutes.
func BenchmarkMemoryPerTimer(b *testing.B) {
	b.Run("wheel", func(b *testing.B) {
		var perTimer float64
		for range b.N {
			perTimer = measureWheelBytes(benchTimers)
		}
		b.ReportMetric(perTimer, "bytes/timer")
	})
	b.Run("AfterFunc", func(b *testing.B) {
		var perTimer float64
		for range b.N {
			perTimer = afterFuncBytesInFreshProcess(b)
		}
		b.ReportMetric(perTimer, "bytes/timer")
	})
}

// afterFuncHelperEnv, when set, makes TestAfterFuncMemoryHelper print the
// AfterFunc measurement. Each measurement runs in a fresh process because
// stopped timers linger in the runtime's timer heaps until it gets round to
// cleaning them, which skews any later measurement in the same process.
const afterFuncHelperEnv = "TIMINGWHEEL_AFTERFUNC_HELPER"

// TestAfterFuncMemoryHelper is not a test: BenchmarkMemoryPerTimer runs the
// test binary again with only this function, to measure AfterFunc.
func TestAfterFuncMemoryHelper(t *testing.T) {
	if os.Getenv(afterFuncHelperEnv) == "" {
		t.Skip("helper process for BenchmarkMemoryPerTimer")
	}
	fmt.Printf("bytes/timer=%g\n", measureAfterFuncBytes(benchTimers))
}

func afterFuncBytesInFreshProcess(b *testing.B) float64 {
	cmd := exec.Command(os.Args[0], "-test.run=^TestAfterFuncMemoryHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), afterFuncHelperEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("helper process: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "bytes/timer="); ok {
			perTimer, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("helper process: %v", err)
			}
			return perTimer
		}
	}
	b.Fatalf("helper process printed no measurement:\n%s", out)
	return 0
}

// measureAfterFuncBytes returns the heap held per timer by n pending
// time.AfterFunc timers, each with a closure capturing its id, as a service
// would write it, and kept in a slice so they can be stopped (a service
// would need a map from id to timer to cancel by id, which costs more).
// The timers are stopped afterwards.
func measureAfterFuncBytes(n int) float64 {
	var before, after runtime.MemStats
	var lastFired atomic.Uint64
	runtime.GC()
	runtime.ReadMemStats(&before)
	rng := rand.New(rand.NewPCG(42, 42))
	timers := make([]*time.Timer, n)
	for i := range timers {
		id := 1_000_000_000 + uint64(i)
		d := time.Minute + time.Duration(rng.Int64N(10*60*1000))*time.Millisecond
		timers[i] = time.AfterFunc(d, func() { lastFired.Store(id) })
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, t := range timers {
		t.Stop()
	}
	runtime.KeepAlive(timers)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}
