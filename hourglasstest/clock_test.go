package hourglasstest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass/hourglasstest"
)

var start = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// received returns the time waiting on ch, if any.
func received(ch <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-ch:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestClockAdvanceFiresDueTimersInOrder(t *testing.T) {
	t.Parallel()
	c := hourglasstest.NewClock(start)
	var fired []string
	at := func(name string) func() {
		return func() { fired = append(fired, name+"@"+c.Now().Sub(start).String()) }
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(time.Second, at("a"))
	c.AfterFunc(2*time.Second, at("b1"))
	c.AfterFunc(2*time.Second, at("b2")) // same deadline: armed later, fires later
	c.AfterFunc(10*time.Second, at("late"))
	stopped := c.AfterFunc(time.Second, at("stopped"))
	if !stopped.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	if got := c.Sleepers(); got != 5 {
		t.Fatalf("Sleepers = %d, want 5", got)
	}
	c.Advance(500 * time.Millisecond)
	if len(fired) != 0 {
		t.Fatalf("fired before due: %v", fired)
	}
	c.Advance(4 * time.Second)
	want := []string{"a@1s", "b1@2s", "b2@2s", "c@3s"}
	if !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if got := c.Now().Sub(start); got != 4500*time.Millisecond {
		t.Fatalf("Now after Advance = start+%s, want start+4.5s", got)
	}
	if next, ok := c.Next(); !ok || !next.Equal(start.Add(10*time.Second)) {
		t.Fatalf("Next = %v %v, want start+10s", next, ok)
	}
	c.Set(start.Add(10 * time.Second))
	if fired[len(fired)-1] != "late@10s" {
		t.Fatalf("Set did not fire the timer due then: %v", fired)
	}
	if c.Sleepers() != 0 {
		t.Fatalf("Sleepers = %d after every timer fired", c.Sleepers())
	}
}

func TestClockTimerStopAndReset(t *testing.T) {
	t.Parallel()
	c := hourglasstest.NewClock(start)
	tm := c.NewTimer(time.Second)
	c.Advance(time.Second)
	if got, ok := received(tm.C()); !ok || !got.Equal(start.Add(time.Second)) {
		t.Fatalf("timer sent %v %v, want start+1s", got, ok)
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	// Fired, not read, then Reset: the stale time is dropped.
	tm.Reset(time.Second)
	c.Advance(time.Second)
	if tm.Reset(time.Minute) {
		t.Fatal("Reset of a fired timer returned true")
	}
	if _, ok := received(tm.C()); ok {
		t.Fatal("a stale time was received after Reset")
	}
	c.Advance(time.Minute)
	if _, ok := received(tm.C()); !ok {
		t.Fatal("the reset timer did not fire")
	}
	if got, ok := received(c.NewTimer(0).C()); !ok || !got.Equal(c.Now()) {
		t.Fatalf("NewTimer(0) sent %v %v, want now at once", got, ok)
	}
}

func TestClockTicker(t *testing.T) {
	t.Parallel()
	c := hourglasstest.NewClock(start)
	tk := c.NewTicker(100 * time.Millisecond)
	var ticks []time.Duration
	for range 3 {
		c.Advance(100 * time.Millisecond)
		got, ok := received(tk.C())
		if !ok {
			t.Fatal("no tick")
		}
		ticks = append(ticks, got.Sub(start))
	}
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}; !slices.Equal(ticks, want) {
		t.Fatalf("ticks at %v, want %v", ticks, want)
	}
	// A slow reader gets one tick, and the ticker keeps its phase.
	c.Advance(time.Second)
	if _, ok := received(tk.C()); !ok {
		t.Fatal("no tick after a long advance")
	}
	if _, ok := received(tk.C()); ok {
		t.Fatal("two ticks waiting")
	}
	if next, _ := c.Next(); next.Sub(start) != 1400*time.Millisecond {
		t.Fatalf("next tick at start+%s, want start+1.4s", next.Sub(start))
	}
	tk.Reset(time.Second)
	c.Advance(500 * time.Millisecond)
	if _, ok := received(tk.C()); ok {
		t.Fatal("tick before the reset period")
	}
	tk.Stop()
	c.Advance(time.Hour)
	if _, ok := received(tk.C()); ok {
		t.Fatal("tick after Stop")
	}
}

// TestClockBlockUntil is how tests use the clock: wait until the code
// under test sleeps on it, then advance.
func TestClockBlockUntil(t *testing.T) {
	t.Parallel()
	c := hourglasstest.NewClock(start)
	woke := make(chan time.Time)
	for range 2 {
		go func() {
			tm := c.NewTimer(time.Minute)
			woke <- <-tm.C()
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.BlockUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	for range 2 {
		if got := <-woke; !got.Equal(start.Add(time.Minute)) {
			t.Fatalf("woke at %v, want start+1m", got)
		}
	}
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	if err := c.BlockUntil(short, 1); err == nil {
		t.Fatal("BlockUntil returned nil with nobody sleeping")
	}
}
