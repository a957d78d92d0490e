package postgres

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hourglass/hourglass/hourglasstest"
)

// TestHintCoalesces: a burst of notices wakes the reader once at once and
// once at the end of hintEvery, never more often; none is lost.
func TestHintCoalesces(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	var wakes atomic.Int64
	h := newHint(clock, func() { wakes.Add(1) })
	for range 1000 {
		h.notify()
	}
	if got := wakes.Load(); got != 1 {
		t.Fatalf("%d wakes right after a burst of 1,000; want 1 (the first)", got)
	}
	clock.Advance(hintEvery)
	if got := wakes.Load(); got != 2 {
		t.Fatalf("%d wakes after hintEvery; want 2 (the burst's rest, once)", got)
	}
	clock.Advance(10 * hintEvery)
	if got := wakes.Load(); got != 2 {
		t.Fatalf("%d wakes with no notice since; want 2", got)
	}
	h.notify()
	if got := wakes.Load(); got != 3 {
		t.Fatalf("a lone notice after a quiet interval: %d wakes, want 3 (at once)", got)
	}
}

// TestRejectsLogOncePerInterval: rejected notices are each counted, and
// logged once, then at most once per rejectLogEvery with the count since.
func TestRejectsLogOncePerInterval(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	var (
		mu   sync.Mutex
		logs strings.Builder
	)
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	var counted atomic.Int64
	r := &rejects{log: slog.New(slog.NewTextHandler(w, nil)), clock: clock, observe: func(string) { counted.Add(1) }}
	for range 100_000 {
		r.add("created", errors.New("no origin"))
	}
	clock.Advance(rejectLogEvery)
	r.add("created", errors.New("no origin"))
	if got := counted.Load(); got != 100_001 {
		t.Errorf("counted %d, want 100001", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if lines := strings.Count(logs.String(), "\n"); lines != 2 {
		t.Fatalf("%d log lines for 100,001 notices over one interval; want 2:\n%s", lines, logs.String())
	}
	if !strings.Contains(logs.String(), "notices=100000") {
		t.Errorf("the second line does not count the notices since the first:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
