package writequeue

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestUrgentFirstInOrderAndBounded(t *testing.T) {
	q := New[int]()
	for i := 1; i <= 5; i++ {
		q.Push(i, false)
	}
	q.Push(100, true)
	q.Push(101, true)
	q.PushLow(200)
	if got := q.Urgent(); got != 2 {
		t.Fatalf("Urgent() = %d, want 2", got)
	}
	if got, all := q.Normal(), q.Len(); got != 5 || all != 8 {
		t.Fatalf("Normal(), Len() = %d, %d, want 5, 8", got, all)
	}
	if got := q.Take(nil, 4); !slices.Equal(got, []int{100, 101, 1, 2}) {
		t.Fatalf("first batch %v, want the urgent ones first, then the oldest normal ones, at most 4", got)
	}
	if got := q.Urgent(); got != 0 {
		t.Fatalf("Urgent() after the take = %d, want 0", got)
	}
	if got := q.Take(nil, 4); !slices.Equal(got, []int{3, 4, 5, 200}) {
		t.Fatalf("second batch %v, want the normal ones, then the low one", got)
	}
}

func TestCloseDrainsThenStops(t *testing.T) {
	q := New[int]()
	q.Push(1, false)
	q.Close()
	q.Close() // idempotent
	if q.Push(2, true) {
		t.Fatal("Push after Close accepted an item")
	}
	if got := q.Take(nil, 10); !slices.Equal(got, []int{1}) {
		t.Fatalf("Take after Close = %v, want what was queued before", got)
	}
	if got := q.Take(nil, 10); len(got) != 0 {
		t.Fatalf("Take on a closed, drained queue = %v, want empty", got)
	}
}

// TestManyWritersTakeEverythingOnce: concurrent producers and two consumers
// (the stores run one or two writers); every item is taken exactly once and
// both consumers see the close.
func TestManyWritersTakeEverythingOnce(t *testing.T) {
	q := New[int]()
	const producers, each = 8, 1000
	var (
		mu    sync.Mutex
		taken = map[int]int{}
		wg    sync.WaitGroup
	)
	for range 2 {
		wg.Go(func() {
			for {
				b := q.Take(nil, 64)
				if len(b) == 0 {
					return
				}
				mu.Lock()
				for _, v := range b {
					taken[v]++
				}
				mu.Unlock()
			}
		})
	}
	var pw sync.WaitGroup
	for p := range producers {
		pw.Go(func() {
			for i := range each {
				q.Push(p*each+i, i%7 == 0)
			}
		})
	}
	pw.Wait()
	q.Close()
	wg.Wait()
	if len(taken) != producers*each {
		t.Fatalf("%d distinct items taken, want %d", len(taken), producers*each)
	}
	for v, n := range taken {
		if n != 1 {
			t.Fatalf("item %d taken %d times", v, n)
		}
	}
}

func TestBudgetBoundsUrgentItems(t *testing.T) {
	q := NewBudgeted(func(n int) int { return n }, 10)
	for _, w := range []int{4, 5, 3, 20} {
		q.Push(w, true)
	}
	q.Push(-1, false)
	if got := q.Take(nil, 100); !slices.Equal(got, []int{4, 5, -1}) {
		t.Fatalf("first batch %v, want urgent items up to weight 10, then the normal one", got)
	}
	if got := q.Take(nil, 100); !slices.Equal(got, []int{3}) {
		t.Fatalf("second batch %v, want 3 (3+20 is over the budget)", got)
	}
	if got := q.Take(nil, 100); !slices.Equal(got, []int{20}) {
		t.Fatalf("third batch %v, want the heavy item alone (always at least one)", got)
	}
}

// TestLowLast: low items are taken only into room left by urgent and
// normal ones, in order, and a closed queue still drains them.
func TestLowLast(t *testing.T) {
	q := New[int]()
	q.PushLow(-1)
	q.PushLow(-2)
	q.Push(1, false)
	q.Push(100, true)
	if got := q.Take(nil, 2); !slices.Equal(got, []int{100, 1}) {
		t.Fatalf("first batch %v, want the urgent and the normal item before any low one", got)
	}
	q.Push(2, false)
	if got := q.Take(nil, 2); !slices.Equal(got, []int{2, -1}) {
		t.Fatalf("second batch %v, want the normal item, then the oldest low one", got)
	}
	q.Close()
	if q.PushLow(-3) {
		t.Fatal("PushLow after Close accepted an item")
	}
	if got := q.Take(nil, 10); !slices.Equal(got, []int{-2}) {
		t.Fatalf("after Close: %v, want the low item still queued", got)
	}
}

// TestWait: Wait returns true for a push (or one no Take answered yet),
// false when a stop fires first, and takes nothing.
func TestWait(t *testing.T) {
	q := New[int]()
	never := make(chan time.Time)
	stopped := make(chan time.Time, 1)
	stopped <- time.Time{}
	if q.Wait(stopped) {
		t.Fatal("Wait with nothing pushed and a stop fired = true")
	}
	q.Push(1, false)
	if !q.Wait(never) {
		t.Fatal("Wait after a push = false")
	}
	if got := q.Len(); got != 1 {
		t.Fatalf("Len() = %d after Wait, want 1 (it takes nothing)", got)
	}
	came := make(chan bool, 1)
	go func() { came <- q.Wait(never) }()
	q.Push(2, true)
	if !<-came {
		t.Fatal("Wait woken by a push = false")
	}
	go func() { came <- q.Wait(never) }()
	q.Close()
	if <-came {
		t.Fatal("Wait woken by Close = true")
	}
}
