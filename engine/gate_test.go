package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
)

// holdGate is a Gate that closes nothing: it counts how often each order
// was handed to it, and keeps the close function of the sweeper's hand.
// It says it took every order handed to it, or, with onlyNew, those
// never handed before.
type holdGate struct {
	mu      sync.Mutex
	onlyNew bool
	handed  map[int64]int
	calls   int
	closeFn func(ctx context.Context, orders []int64, cause hourglass.CloseCause) error
	changed chan struct{}
}

func (g *holdGate) Hold(orders []int64, closeFn func(ctx context.Context, orders []int64, cause hourglass.CloseCause) error) (taken int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	for _, id := range orders {
		g.handed[id]++
		if !g.onlyNew || g.handed[id] == 1 {
			taken++
		}
	}
	defer func() {
		close(g.changed)
		g.changed = make(chan struct{})
	}()
	g.closeFn = closeFn
	return taken
}

// handedAtLeast reports whether every order was handed n times or more.
func (g *holdGate) handedAtLeast(orders []hourglass.Order, n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range orders {
		if g.handed[o.ID] < n {
			return false
		}
	}
	return true
}

// TestGateHoldsEveryClose: with a Gate, neither the scheduler nor the
// sweeper closes an order: both hand it to the gate (the sweeper paging
// past the orders the gate holds pending, more than a CloseBatch of them),
// timers still fire, and the orders close when the gate calls the close
// function it was given, as swept closes.
func TestGateHoldsEveryClose(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	var due []hourglass.Order
	for range 250 {
		due = append(due, f.create(t, time.Second))
	}
	timer, _, err := f.store.ArmTimer(f.ctx, hourglass.ArmTimerParams{Key: "t", Delay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	gate := &holdGate{handed: map[int64]int{}, changed: make(chan struct{})}
	e := f.engine(t, Config{Gate: gate, CloseBatch: 100, SweepInterval: time.Second, LoadInterval: time.Minute})
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	// The first load hands every order to the scheduler, which hands
	// them to the gate; then the sweeper, a tick at a time, again.
	giveUp := time.After(20 * time.Second)
	for n := 1; n <= 2; n++ {
		for !gate.handedAtLeast(due, n) {
			gate.mu.Lock()
			changed := gate.changed
			gate.mu.Unlock()
			wait := 10 * time.Second
			if n == 2 { // the sweeper's ticker may not be armed yet: tick again soon
				if err := clock.BlockUntil(ctx, 3); err != nil {
					t.Fatal(err)
				}
				clock.Advance(time.Second)
				wait = 50 * time.Millisecond
			}
			select {
			case <-changed:
			case <-time.After(wait):
			case <-giveUp:
				t.Fatalf("orders not all handed to the gate %d times", n)
			case err := <-done:
				t.Fatalf("Run returned: %v", err)
			}
		}
	}
	if n, err := f.store.CountPendingDue(f.ctx, clock.Now(), 0); err != nil || n != len(due) {
		t.Fatalf("pending due orders = %d, %v; want all %d held", n, err, len(due))
	}
	if c, _, _ := f.rec.counts(); c != 0 {
		t.Fatalf("%d orders closed behind the gate's back", c)
	}
	fired, err := f.store.Timer(f.ctx, "t")
	if err != nil || fired.Status != hourglass.TimerFired {
		t.Fatalf("timer %d = %+v, %v; want fired (timers are not gated)", timer.ID, fired, err)
	}
	gate.mu.Lock()
	closeFn := gate.closeFn
	gate.mu.Unlock()
	ids := make([]int64, len(due))
	for i, o := range due {
		ids[i] = o.ID
	}
	if err := closeFn(f.ctx, ids, hourglass.CauseCheckClose); err != nil {
		t.Fatal(err)
	}
	if c, swept, _ := f.rec.counts(); c != len(due) || swept != len(due) {
		t.Fatalf("after the gate's close: %d closed (%d swept), want %d swept closes", c, swept, len(due))
	}
	// Closing them again is a no-op, counted stale.
	if err := closeFn(f.ctx, ids[:10], hourglass.CauseCheckClose); err != nil || f.rec.staleCount() != 10 {
		t.Fatalf("second close: %v, %d stale; want 10 stale", err, f.rec.staleCount())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGateFullStopsSweep: a sweep stops paging at a page the gate took
// none of (all held already, or no room), so orders held pending while
// their checks fail are not all read again at every sweep; a page with
// one new order goes on to the next.
func TestGateFullStopsSweep(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	for range 250 {
		f.create(t, time.Second)
	}
	clock.Advance(time.Minute)
	gate := &holdGate{onlyNew: true, handed: map[int64]int{}, changed: make(chan struct{})}
	e := f.engine(t, Config{Gate: gate, CloseBatch: 100})
	for i, want := range []int{3, 1} { // first every page; then the first only
		before := gate.calls
		if _, err := e.sweep(f.ctx, 0, hourglass.CauseSweeper); err != nil {
			t.Fatal(err)
		}
		if got := gate.calls - before; got != want {
			t.Fatalf("sweep %d handed %d pages to the gate, want %d", i+1, got, want)
		}
	}
	if len(gate.handed) != 250 {
		t.Fatalf("%d orders handed, want 250", len(gate.handed))
	}
}
