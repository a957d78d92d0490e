package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openKafka is replaced when the kafka mechanism lands.
func openKafka(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the kafka delay mechanism is not built yet")
}
