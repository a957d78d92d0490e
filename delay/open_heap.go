package delay

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/heap"
)

// openHeap returns the in-memory delay queue; it has nothing to connect to
// and never fails.
func openHeap(_ context.Context, o Options) (hourglass.Scheduler, error) {
	return heap.New(heap.Config{Clock: o.Clock, Logger: o.Logger}), nil
}
