// Package nodetest starts real nodes for tests, through node.New as
// `hourglass serve` does, with settings a test wants: a port on loopback,
// a new database of the store the test run names (storetest.URL), a
// discarding logger, and a stop in t.Cleanup. A test that needs an engine
// on a fake clock, or parts started at different moments, builds them by
// hand instead.
package nodetest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store/storetest"
)

// Start starts a node on cfg and returns it once its engine is ready. The
// zero value of a field is the test default: Addr 127.0.0.1:0, Store a new
// database of the store HOURGLASS_TEST_STORE names (storetest.URL),
// Logger discarding. The node stops when the test ends; a failure of its
// Run fails the test.
func Start(t testing.TB, cfg node.Config) *node.Node {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Store.URL == "" && cfg.Store.DataDir == "" {
		cfg.Store.URL = storetest.URL(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("node Run: %v", err)
		}
		n.Close()
	})
	testenv.Eventually(t, 15*time.Second, "the node's engine ready", n.Engine.Ready)
	return n
}

// URL returns the base URL of n's API.
func URL(n *node.Node) string { return "http://" + n.Addr().String() }

// Mechanism returns a node.Config.OpenDelay that opens the delay mechanism
// name with the options opts returns for the node's store (a test's
// namespace and services), and destroys the objects it made on its broker
// when the test ends (delay.Destroyer), so runs leave nothing behind.
func Mechanism(t testing.TB, name string, opts func(store hourglass.Store) delay.Options) func(context.Context, delay.Options) (hourglass.Scheduler, error) {
	return func(ctx context.Context, o delay.Options) (hourglass.Scheduler, error) {
		sched, err := delay.Open(ctx, name, opts(o.Store))
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() {
			if d, ok := sched.(delay.Destroyer); ok {
				if err := d.Destroy(context.Background()); err != nil {
					t.Logf("destroy the %s namespace: %v", name, err)
				}
			}
		})
		return sched, nil
	}
}
