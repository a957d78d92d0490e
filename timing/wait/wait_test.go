package wait

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/hourglasstest"
)

func TestWhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if !While(ctx, func() bool { return false }, time.Millisecond, time.Hour) {
		t.Fatal("not busy: While = false")
	}

	// Busy for three polls, then not: returns then, well before max.
	var calls atomic.Int64
	if !While(ctx, func() bool { return calls.Add(1) <= 3 }, time.Millisecond, time.Hour) || calls.Load() != 4 {
		t.Fatalf("busy for 3 polls: %d calls, want 4", calls.Load())
	}

	// Always busy: gives up after max, by the clock.
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	gaveUp := make(chan bool, 1)
	var polls atomic.Int64
	go func() {
		gaveUp <- WhileOn(ctx, clock, func() bool { polls.Add(1); return true }, time.Millisecond, 30*time.Millisecond)
	}()
	bctx, cancelBlock := context.WithTimeout(ctx, 10*time.Second)
	defer cancelBlock()
	if err := clock.BlockUntil(bctx, 2); err != nil { // the give-up timer and the poll ticker
		t.Fatal(err)
	}
	for range 29 {
		clock.Advance(time.Millisecond)
	}
	select {
	case <-gaveUp:
		t.Fatal("always busy: returned before max")
	default:
	}
	clock.Advance(time.Millisecond)
	if !<-gaveUp {
		t.Fatal("always busy: While = false, want true after max")
	}
	if polls.Load() < 2 {
		t.Fatalf("always busy: %d calls of busy, want it asked every poll", polls.Load())
	}

	// ctx ends first: false.
	ctx2, cancel := context.WithCancel(ctx)
	ended := make(chan bool, 1)
	go func() { ended <- WhileOn(ctx2, clock, func() bool { return true }, time.Millisecond, time.Hour) }()
	if err := clock.BlockUntil(bctx, 2); err != nil {
		t.Fatal(err)
	}
	cancel()
	if <-ended {
		t.Fatal("ctx ended while busy: While = true, want false")
	}
	if While(ctx2, func() bool { return false }, time.Millisecond, time.Hour) {
		t.Fatal("ctx ended, not busy: While = true, want false")
	}
}
