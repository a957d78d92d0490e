package testenv

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper()      {}
func (f *fatalTB) Name() string { return "fatalTB" }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Eventually on its own goroutine and returns the failure
// message, "" when it returned.
func run(within time.Duration, cond func() bool) string {
	f := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(f, within, "the condition", cond)
	}()
	<-done
	return f.msg
}

func TestEventually(t *testing.T) {
	t.Parallel()
	t.Run("AtOnce", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		if msg := run(time.Second, func() bool { calls.Add(1); return true }); msg != "" {
			t.Fatalf("failed: %s", msg)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("cond called %d times, want 1", n)
		}
	})
	t.Run("Later", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		if msg := run(10*time.Second, func() bool { return calls.Add(1) == 5 }); msg != "" {
			t.Fatalf("failed: %s", msg)
		}
		if n := calls.Load(); n != 5 {
			t.Fatalf("cond called %d times, want 5", n)
		}
	})
	t.Run("Never", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		msg := run(50*time.Millisecond, func() bool { return false })
		if want := "the condition: not within 50ms"; msg != want {
			t.Fatalf("failure %q, want %q", msg, want)
		}
		if took := time.Since(start); took < 50*time.Millisecond {
			t.Fatalf("failed after %s, before the 50ms", took)
		}
	})
}

func TestServiceURLNotAURL(t *testing.T) {
	t.Setenv("HOURGLASS_TEST_NOTHING_URL", "not a url")
	f := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ServiceURL(f, "Nothing", "HOURGLASS_TEST_NOTHING_URL", "")
	}()
	<-done
	if !strings.Contains(f.msg, "is not a URL with a host") {
		t.Fatalf("failure %q", f.msg)
	}
}

func TestUntil(t *testing.T) {
	t.Parallel()
	start := time.Now()
	if !Until(t.Context(), start.Add(20*time.Millisecond)) {
		t.Fatal("Until returned false with a live context")
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("returned after %s, before its instant", took)
	}
	if !Until(t.Context(), start.Add(-time.Hour)) {
		t.Fatal("a past instant returned false")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if Until(ctx, time.Now().Add(time.Hour)) {
		t.Fatal("an ended context returned true")
	}
}

func TestEventuallyEvery(t *testing.T) {
	t.Parallel()
	f := &fatalTB{}
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		EventuallyEvery(f, 75*time.Millisecond, 20*time.Millisecond, "slow", func() bool { calls.Add(1); return false })
	}()
	<-done
	if want := "slow: not within 75ms"; f.msg != want {
		t.Fatalf("failure %q, want %q", f.msg, want)
	}
	if n := calls.Load(); n < 3 || n > 6 {
		t.Fatalf("cond called %d times in 75ms every 20ms, want 3 to 6", n)
	}
}

func TestPhase(t *testing.T) {
	t.Parallel()
	start := time.Now()
	Phase(t, 10*time.Millisecond, "a short phase")
	if took := time.Since(start); took < 10*time.Millisecond {
		t.Fatalf("returned after %s, before its 10ms", took)
	}
}
