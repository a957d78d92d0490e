package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openRabbitMQ is replaced when the rabbitmq mechanism lands.
func openRabbitMQ(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the rabbitmq delay mechanism is not built yet")
}
