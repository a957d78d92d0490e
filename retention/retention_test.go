package retention_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/retention"
	"github.com/hourglass/hourglass/store/sqlite"
)

// setup opens a SQLite store on a fake clock at hourglasstest.Epoch, with a
// product to order.
func setup(t *testing.T) (*sqlite.Store, *hourglasstest.Clock) {
	t.Helper()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.PutProduct(context.Background(), hourglass.Product{SKU: "A", Name: "A", Category: "x", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	return s, clock
}

type counts struct {
	mu      sync.Mutex
	pruned  map[string]int
	dropped int
}

func (c *counts) Pruned(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pruned == nil {
		c.pruned = map[string]int{}
	}
	c.pruned[kind] += n
}

func (c *counts) DeadLettersDropped(n int) { c.mu.Lock(); c.dropped += n; c.mu.Unlock() }

// pruneAdvancing runs one round of p, moving clock on by pause each time
// the round sleeps on it between batches, and returns the round's report.
func pruneAdvancing(t *testing.T, ctx context.Context, p *retention.Pruner, clock *hourglasstest.Clock, pause time.Duration) retention.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	others := clock.Sleepers() // armed by the store, not by the round
	done := make(chan retention.Report, 1)
	go func() { done <- p.Prune(ctx) }()
	for {
		sleeping := make(chan error, 1)
		bctx, stopBlock := context.WithCancel(ctx)
		go func() { sleeping <- clock.BlockUntil(bctx, others+1) }()
		select {
		case r := <-done:
			stopBlock()
			<-sleeping
			return r
		case err := <-sleeping:
			stopBlock()
			if err != nil {
				t.Fatalf("the round neither slept nor ended: %v", err)
			}
			clock.Advance(pause)
		}
	}
}

// TestPrune: one round prunes each kind past its retention, in batches
// until none is left, and not before; a node that does not lead prunes
// nothing.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := setup(t)
	for i := range 5 {
		key := string(rune('a' + i))
		if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}},
			Timeout: time.Minute, IdempotencyKey: key, RequestHash: []byte("h")}); err != nil {
			t.Fatal(err)
		}
		tm, _, err := s.ArmTimer(ctx, hourglass.ArmTimerParams{Key: "t" + key, Delay: time.Hour, RequestHash: []byte("h")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelTimer(ctx, tm.Key); err != nil {
			t.Fatal(err)
		}
	}
	leading := false
	obs := &counts{}
	p, err := retention.New(s, retention.Config{Batch: 2, Pause: time.Millisecond, Leader: func() bool { return leading }, Clock: clock, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * 24 * time.Hour)
	if r := p.Prune(ctx); r != (retention.Report{}) {
		t.Fatalf("a node that does not lead pruned %+v", r)
	}
	leading = true
	clock.Set(hourglasstest.Epoch.Add(retention.IdempotencyRetentionDefault)) // the keys are at the boundary
	if r := p.Prune(ctx); r != (retention.Report{}) {
		t.Fatalf("pruned at the boundary: %+v", r)
	}
	clock.Set(hourglasstest.Epoch.Add(retention.TimerRetentionDefault + time.Millisecond))
	r := pruneAdvancing(t, ctx, p, clock, time.Millisecond) // batches of 2: it pauses between them
	// 5 order.created events (7 days), 5 keys (24 h), 4 timers: the newest stays.
	if want := (retention.Report{IdempotencyKeys: 5, Timers: 4, Events: 5}); r != want {
		t.Fatalf("Prune = %+v, want %+v", r, want)
	}
	if obs.pruned[retention.KindIdempotencyKeys] != 5 || obs.pruned[retention.KindTimers] != 4 || obs.pruned[retention.KindEvents] != 5 {
		t.Errorf("observed %v", obs.pruned)
	}
	if r := p.Prune(ctx); r != (retention.Report{}) {
		t.Errorf("second round pruned %+v", r)
	}
}

// TestTimerLimit: at the maximum a new key is refused with limit_exceeded
// while existing timers may still be re-armed; room freed by pruning is
// seen once the count is taken again.
func TestTimerLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := setup(t)
	l, err := retention.LimitTimers(s, retention.TimerLimitConfig{Max: 2, CountEvery: time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	arm := func(key string) error {
		_, _, err := l.ArmTimer(ctx, hourglass.ArmTimerParams{Key: key, Delay: time.Hour, RequestHash: []byte(key)})
		return err
	}
	for _, key := range []string{"a", "b"} {
		if err := arm(key); err != nil {
			t.Fatalf("arm %s: %v", key, err)
		}
	}
	if err := arm("c"); hourglass.ErrorCode(err) != hourglass.CodeLimitExceeded {
		t.Fatalf("arm c at the maximum: %v; want limit_exceeded", err)
	}
	if _, _, err := l.ArmTimer(ctx, hourglass.ArmTimerParams{Key: "a", Delay: 2 * time.Hour, RequestHash: []byte("again")}); err != nil {
		t.Fatalf("re-arm a at the maximum: %v", err)
	}
	if _, _, err := l.ArmTimer(ctx, hourglass.ArmTimerParams{Key: "bad key"}); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
		t.Fatalf("invalid key at the maximum: %v; want invalid_argument", err)
	}
	// Cancelled and pruned: room for one (b, the newest, stays).
	for _, key := range []string{"a", "b"} {
		if _, err := s.CancelTimer(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	if n, _, err := s.PruneTimers(ctx, clock.Now(), 10); err != nil || n != 1 {
		t.Fatalf("PruneTimers = %d, %v", n, err)
	}
	clock.Advance(time.Second) // the count is stale: taken again in the background
	testenv.Eventually(t, 10*time.Second, "arm c accepted after room was made", func() bool { return arm("c") == nil })

	if err := arm("d"); hourglass.ErrorCode(err) != hourglass.CodeLimitExceeded {
		t.Fatalf("arm d at the maximum again: %v; want limit_exceeded", err)
	}
}
