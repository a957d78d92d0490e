package node

import (
	"context"
	"testing"
)

// RunInTest runs n for the rest of the test: Run in the background and, in
// tb.Cleanup, its context cancelled, its return awaited (an error fails
// the test) and n closed. For this package's tests and node_test's.
func RunInTest(tb testing.TB, n *Node) {
	tb.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	tb.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
		n.Close()
	})
}
