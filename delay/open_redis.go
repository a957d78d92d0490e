package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openRedis is replaced when the redis mechanism lands.
func openRedis(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the redis delay mechanism is not built yet")
}
