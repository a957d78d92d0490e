package wait

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
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

	// Always busy: gives up after max.
	start := time.Now()
	if !While(ctx, func() bool { return true }, time.Millisecond, 30*time.Millisecond) {
		t.Fatal("always busy: While = false, want true after max")
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Fatalf("always busy: returned after %s, before max", waited)
	}

	// ctx ends first: false.
	ctx2, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if While(ctx2, func() bool { return true }, time.Millisecond, time.Hour) {
		t.Fatal("ctx ended while busy: While = true, want false")
	}
	if While(ctx2, func() bool { return false }, time.Millisecond, time.Hour) {
		t.Fatal("ctx ended, not busy: While = true, want false")
	}
}
