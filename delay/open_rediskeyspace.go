package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openRedisKeyspace is replaced when the rediskeyspace mechanism lands.
func openRedisKeyspace(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the rediskeyspace delay mechanism is not built yet")
}
