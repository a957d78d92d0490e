package benchmark

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// countingTarget counts the calls it receives, by method.
type countingTarget struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingTarget) count(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[method]++
}

func (c *countingTarget) Create(context.Context, string, int64, time.Duration, time.Duration) (hourglass.Order, error) {
	c.count("create")
	return hourglass.Order{}, nil
}

func (c *countingTarget) Expiring(context.Context, int64) ([]time.Time, error) {
	c.count("expiring")
	return nil, nil
}

func (c *countingTarget) Pay(context.Context, int64) (bool, error) {
	c.count("pay")
	return true, nil
}

func (c *countingTarget) Order(context.Context, int64) (hourglass.Order, error) {
	c.count("order")
	return hourglass.Order{}, nil
}

func (c *countingTarget) Product(context.Context, string) (hourglass.Product, error) {
	c.count("product")
	return hourglass.Product{}, nil
}

func (c *countingTarget) PutProduct(context.Context, hourglass.Product) error {
	c.count("put")
	return nil
}

func TestRoundRobin(t *testing.T) {
	t.Parallel()
	targets := []*countingTarget{{}, {}, {}}
	rr := NewRoundRobin(targets[0], targets[1], targets[2])
	ctx := t.Context()
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			rr.Create(ctx, "SKU", 1, time.Second, 0)
			rr.Pay(ctx, 1)
		})
	}
	wg.Wait()
	rr.PutProduct(ctx, hourglass.Product{SKU: "SKU"})
	for i, tg := range targets {
		// 60 requests in turn over 3 targets: 20 each, whatever the mix.
		if got := tg.calls["create"] + tg.calls["pay"]; got != 20 {
			t.Errorf("target %d got %d creates and pays, want 20 (%v)", i, got, tg.calls)
		}
	}
	if targets[0].calls["put"] != 1 || targets[1].calls["put"]+targets[2].calls["put"] != 0 {
		t.Errorf("PutProduct went to %v, %v, %v; want the first target only", targets[0].calls, targets[1].calls, targets[2].calls)
	}
}
