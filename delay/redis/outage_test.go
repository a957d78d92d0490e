package redis_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/redis"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/hourglasstest/outage"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestOutage stops the real Redis (shutdown nosave: this machine runs it
// without persistence, so the timers are lost) for about 2 s mid-load and
// starts it again. The sweeper must close what Redis lost; nothing may be
// closed twice.
func TestOutage(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	raw, c := setup(t)
	ns := hourglasstest.Namespace(t)
	outage.Run(t, outage.Config{
		Open: func(t *testing.T, _ hourglass.Store) hourglass.Scheduler {
			return open(t, redis.Config{URL: raw, Namespace: ns}, c)
		},
		Outage: func(t *testing.T) {
			ctx := context.Background()
			t.Logf("timers lost with the restart: %d scheduled, %d in flight",
				c.ZCard(ctx, ns+":timers").Val(), c.ZCard(ctx, ns+":inflight").Val())
			outage.RestartRedis(t, c.Options().Addr)
		},
	})
}
