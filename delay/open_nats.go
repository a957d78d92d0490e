package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openNATS is replaced when the nats mechanism lands.
func openNATS(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the nats delay mechanism is not built yet")
}
