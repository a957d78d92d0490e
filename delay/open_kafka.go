package delay

import (
	"cmp"
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/kafka"
)

// openKafka opens the Kafka delay topics at o.KafkaURL (default
// KafkaURLDefault), failing when no broker answers or the topics cannot be
// created.
func openKafka(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return kafka.Open(ctx, kafka.Config{
		URL:       cmp.Or(o.KafkaURL, KafkaURLDefault),
		Namespace: o.Namespace,
		Clock:     o.Clock,
		Logger:    o.Logger,
	})
}
