package delay

import (
	"cmp"
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/rediskeyspace"
)

var _ Destroyer = (*rediskeyspace.Scheduler)(nil)

// openRedisKeyspace opens the Redis key-expiry listener at o.RedisURL
// (default RedisURLDefault) with keys under o.Namespace.
func openRedisKeyspace(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return rediskeyspace.Open(ctx, rediskeyspace.Config{
		URL:       cmp.Or(o.RedisURL, RedisURLDefault),
		Namespace: o.Namespace,
		Clock:     o.Clock,
		Logger:    o.Logger,
	})
}
