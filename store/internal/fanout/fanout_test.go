package fanout

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// closes is a Queue of closes: queued waiting.
type closes struct{ queued atomic.Int64 }

func (c *closes) Urgent() int { return int(c.queued.Load()) }

// run starts a Loop with cfg (a test name and a quiet log, Check an hour:
// only Run's first look and Wake; a close queue that stays empty unless
// cfg has one) and runs it until the test ends.
func run(t *testing.T, cfg Loop) *Loop {
	t.Helper()
	cfg.Name, cfg.Log, cfg.Check = "test", slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour
	if cfg.Queue == nil {
		cfg.Queue = &closes{}
	}
	l := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// start runs a Loop with notes notes and the given close queue, until the
// test ends; fanned counts the notes fanned out.
func start(t *testing.T, notes int64, q *closes) (l *Loop, fanned *atomic.Int64) {
	t.Helper()
	fanned = new(atomic.Int64)
	var left atomic.Int64
	left.Store(notes)
	l = run(t, Loop{Queue: q, One: func(context.Context) (bool, error) {
		if left.Add(-1) < 0 {
			left.Store(0)
			return false, nil
		}
		fanned.Add(1)
		return true, nil
	}})
	return l, fanned
}

// TestLooksAtStart: notes a crash left are fanned out at once, all of them.
func TestLooksAtStart(t *testing.T) {
	t.Parallel()
	_, fanned := start(t, 3, &closes{})
	testenv.Eventually(t, 10*time.Second, "3 notes", func() bool { return fanned.Load() == 3 })
}

// TestWaitsWhileClosesQueued: nothing is fanned out while closes are
// queued (up to MaxWait), then everything is.
func TestWaitsWhileClosesQueued(t *testing.T) {
	t.Parallel()
	var q closes
	q.queued.Store(1)
	_, fanned := start(t, 2, &q)
	testenv.Phase(t, MaxWait/4, "a close stays queued: nothing may be fanned out")
	if n := fanned.Load(); n != 0 {
		t.Fatalf("%d notes fanned out with a close queued", n)
	}
	q.queued.Store(0)
	testenv.Eventually(t, 10*time.Second, "2 notes", func() bool { return fanned.Load() == 2 })
}

// TestGivesUpWaiting: a close path that never empties delays the fan-out
// by MaxWait, it does not stop it.
func TestGivesUpWaiting(t *testing.T) {
	t.Parallel()
	var q closes
	q.queued.Store(1)
	began := hourglass.SystemClock{}.Now()
	_, fanned := start(t, 1, &q)
	testenv.Eventually(t, 10*time.Second, "the note", func() bool { return fanned.Load() == 1 })
	if waited := (hourglass.SystemClock{}).Now().Sub(began); waited < MaxWait {
		t.Fatalf("fanned out after %s with a close queued, before MaxWait", waited)
	}
}

// TestQuietAfterLastDeferral: writes that defer (Wake; the queue stays
// empty) while a look waits hold the fan-out until Quiet after the last of
// them; a failed attempt is logged and retried at the next look.
func TestQuietAfterLastDeferral(t *testing.T) {
	t.Parallel()
	var (
		q        closes
		notes    atomic.Int64
		calls    atomic.Int64
		fannedAt atomic.Int64
	)
	l := run(t, Loop{Queue: &q, One: func(context.Context) (bool, error) {
		if calls.Add(1) == 2 {
			return false, errors.New("database down")
		}
		if notes.Load() == 0 {
			return false, nil
		}
		notes.Add(-1)
		fannedAt.Store(hourglass.SystemClock{}.Now().UnixNano())
		return true, nil
	}})
	testenv.Eventually(t, 10*time.Second, "the first look", func() bool { return calls.Load() == 1 })

	notes.Store(1)
	l.Wake() // this look fails
	testenv.Eventually(t, 10*time.Second, "the failed look", func() bool { return calls.Load() == 2 })
	var touched time.Time
	began := hourglass.SystemClock{}.Now()
	for i := range 8 { // a deferring write every 5 ms for 40 ms, while the look waits
		touched = hourglass.SystemClock{}.Now()
		l.Wake()
		testenv.Until(t.Context(), began.Add(time.Duration(i+1)*5*time.Millisecond))
	}
	// fannedAt, not notes: One stores it after taking the note, and a
	// look between the two read 0 (a fan-out at the epoch).
	testenv.Eventually(t, 10*time.Second, "the note", func() bool { return fannedAt.Load() != 0 })
	if after := time.Duration(fannedAt.Load() - touched.UnixNano()); after < Quiet-time.Millisecond {
		t.Fatalf("fanned out %s after a write deferred, within Quiet (%s)", after, Quiet)
	}
}

// TestDeferralsDelayALookOnce: writes that keep deferring (bursts back to
// back, one every 10 ms) delay a look's notes by MaxWait in all, not
// MaxWait each: 20 notes are all fanned out within MaxWait and a second.
func TestDeferralsDelayALookOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := hourglass.SystemClock{}.Now()
	l, fanned := start(t, 20, &closes{})
	go func() { // a deferring write every 10 ms until the test ends
		for i := 1; ctx.Err() == nil; i++ {
			l.Wake()
			testenv.Until(ctx, began.Add(time.Duration(i)*10*time.Millisecond))
		}
	}()
	testenv.Eventually(t, 10*time.Second, "20 notes", func() bool { return fanned.Load() == 20 })
	if took := (hourglass.SystemClock{}).Now().Sub(began); took > MaxWait+time.Second {
		t.Fatalf("20 notes behind writes that keep deferring took %s; want at most MaxWait (%s) and a second", took, MaxWait)
	}
}

// TestTrickleDoesNotHold: closes trickling in one at a time (each queued
// for 2 ms of every 10, none deferring: steady state beside a burst) do
// not hold a burst's notes: the bound, a burst's deliveries within
// 5 s of its last close while 50 closes a second keep coming, left no room
// for MaxWait (3 s) of waiting.
func TestTrickleDoesNotHold(t *testing.T) {
	t.Parallel()
	var q closes
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		trickle := hourglass.SystemClock{}.Now()
		for i := 1; ctx.Err() == nil; i++ {
			q.queued.Store(1)
			testenv.Until(ctx, trickle.Add(time.Duration(i)*10*time.Millisecond-8*time.Millisecond))
			q.queued.Store(0)
			testenv.Until(ctx, trickle.Add(time.Duration(i)*10*time.Millisecond))
		}
	}()
	var notes, calls, fanned atomic.Int64
	l := run(t, Loop{Queue: &q, One: func(context.Context) (bool, error) {
		calls.Add(1)
		if notes.Load() == 0 {
			return false, nil
		}
		notes.Add(-1)
		fanned.Add(1)
		return true, nil
	}})
	testenv.Eventually(t, 10*time.Second, "the first look", func() bool { return calls.Load() == 1 })
	notes.Store(20)
	began := hourglass.SystemClock{}.Now()
	l.Wake() // the burst's last deferring write
	testenv.Eventually(t, 10*time.Second, "20 notes", func() bool { return fanned.Load() == 20 })
	if took := (hourglass.SystemClock{}).Now().Sub(began); took > MaxWait/2 {
		t.Fatalf("20 notes beside a trickle of closes took %s; want well within MaxWait (%s)", took, MaxWait)
	}
}

func TestBurst(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		queued, closes int
		want           bool
	}{
		{0, 0, false},
		{3, 0, false},          // no close in the write
		{0, 10, false},         // a few closes, nothing behind: steady state
		{1, 10, true},          // more queued behind it
		{0, BurstCloses, true}, // a writer that took a whole burst's batches
		{0, 4 * BurstCloses, true},
	} {
		if got := Burst(tt.queued, tt.closes); got != tt.want {
			t.Errorf("Burst(%d, %d) = %v, want %v", tt.queued, tt.closes, got, tt.want)
		}
	}
}

// TestCountsAtEachLook: the notes are counted at the start of each look
// (hourglass_fanout_pending): those a crash left at Run's first, none at
// the look after they were fanned out.
func TestCountsAtEachLook(t *testing.T) {
	t.Parallel()
	var left atomic.Int64
	left.Store(3)
	counted := make(chan int, 10)
	l := run(t, Loop{
		One: func(context.Context) (bool, error) {
			if left.Load() == 0 {
				return false, nil
			}
			left.Add(-1)
			return true, nil
		},
		Count:   func(context.Context) (int, error) { return int(left.Load()), nil },
		Counted: func(n int) { counted <- n },
	})
	next := func() int {
		select {
		case n := <-counted:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no count within 10 s")
			return -1
		}
	}
	if n := next(); n != 3 {
		t.Fatalf("first look counted %d, want 3", n)
	}
	testenv.Eventually(t, 10*time.Second, "3 notes fanned out", func() bool { return left.Load() == 0 })
	l.Wake()
	if n := next(); n != 0 {
		t.Fatalf("the look after the fan-out counted %d, want 0", n)
	}
}
