package delay

import (
	"cmp"
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/nats"
)

var _ Destroyer = (*nats.Scheduler)(nil)

// openNATS opens the NATS JetStream mechanism at o.NATSURL (default
// NATSURLDefault) with its stream, consumer and subjects under o.Namespace.
func openNATS(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nats.Open(ctx, nats.Config{
		URL:       cmp.Or(o.NATSURL, NATSURLDefault),
		Namespace: o.Namespace,
		Clock:     o.Clock,
		Logger:    o.Logger,
	})
}
