package delay

import (
	"cmp"
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/redis"
)

var _ Destroyer = (*redis.Scheduler)(nil)

// openRedis opens the Redis sorted-set mechanism at o.RedisURL (default
// RedisURLDefault) with keys under o.Namespace.
func openRedis(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return redis.Open(ctx, redis.Config{
		URL:       cmp.Or(o.RedisURL, RedisURLDefault),
		Namespace: o.Namespace,
		Clock:     o.Clock,
		Logger:    o.Logger,
	})
}
