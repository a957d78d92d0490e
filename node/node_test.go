package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
)

// TestNodeClosesOnTime: a node built from a nearly zero Config on SQLite
// serves the API, and an order created through it closes at its deadline
// although neither the sweeper nor a window load runs meanwhile: the
// store's due feed took it to the engine. Run returns nil once its context
// ends.
func TestNodeClosesOnTime(t *testing.T) {
	t.Parallel()
	n, err := node.New(context.Background(), node.Config{
		Addr:     "127.0.0.1:0",
		Store:    store.Options{DataDir: t.TempDir()},
		Engine:   engine.Config{SweepInterval: time.Hour, LoadInterval: time.Minute, Window: time.Hour},
		TimerMax: 1000,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()

	c := api.NewClient("http://"+n.Addr().String(), "", nil)
	if _, err := c.PutProduct(ctx, "A", "a", "", 10); err != nil {
		t.Fatal(err)
	}
	o, _, err := c.CreateOrder(ctx, api.CreateOrderRequest{UserID: "u", Items: []api.ItemJSON{{SKU: "A", Quantity: 1}}, TimeoutMs: 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	var status hourglass.State
	waited := false
	defer func() {
		if !waited { // Eventually failed the test: say what the order is
			t.Logf("order %d is %s", o.ID, status)
		}
	}()
	testenv.EventuallyEvery(t, 10*time.Second, 20*time.Millisecond, fmt.Sprintf("order %d closed by the engine after its 1 s deadline", o.ID), func() bool {
		got, err := n.Store.Order(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		status = got.Status
		return got.Status == "closed"
	})
	waited = true
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
