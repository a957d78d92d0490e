package delay

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/rabbitmq"
)

var _ Destroyer = (*rabbitmq.Scheduler)(nil)

// openRabbitMQ connects the RabbitMQ mechanism at o.RabbitMQURL (default
// RabbitMQURLDefault) under o.Namespace, using the delayed-message exchange
// plugin if the broker has it and TTL tier queues otherwise.
func openRabbitMQ(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	if o.RabbitMQURL == "" {
		o.RabbitMQURL = RabbitMQURLDefault
	}
	return rabbitmq.New(ctx, rabbitmq.Config{
		URL:       o.RabbitMQURL,
		Namespace: o.Namespace,
		Clock:     o.Clock,
		Logger:    o.Logger,
	})
}
