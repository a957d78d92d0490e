package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openHeap is replaced when the heap mechanism lands.
func openHeap(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the heap delay mechanism is not built yet")
}
