package rediskeyspace_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/rediskeyspace"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/hourglasstest/outage"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestOutage stops the real Redis (shutdown nosave: this machine runs it
// without persistence) for about 2 s mid-load and starts it again: the keys
// and the notify-keyspace-events setting are gone, and events due while it
// was down are never published. Run must turn the events back on; the
// sweeper closes what was lost; nothing may be closed twice.
func TestOutage(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	raw, c := setup(t)
	ns := hourglasstest.Namespace(t)
	outage.Run(t, outage.Config{
		Open: func(t *testing.T, _ hourglass.Store) hourglass.Scheduler {
			return open(t, rediskeyspace.Config{URL: raw, Namespace: ns}, c)
		},
		Outage: func(t *testing.T) {
			keys, _ := c.Keys(context.Background(), ns+":order:*").Result()
			t.Logf("timer keys lost with the restart: %d", len(keys))
			outage.RestartRedis(t, c.Options().Addr)
			flags, err := c.ConfigGet(context.Background(), "notify-keyspace-events").Result()
			t.Logf("notify-keyspace-events after the restart: %q %v", flags["notify-keyspace-events"], err)
		},
	})
	flags, err := c.ConfigGet(context.Background(), "notify-keyspace-events").Result()
	if err != nil || flags["notify-keyspace-events"] == "" {
		t.Fatalf("notify-keyspace-events at the end: %q %v; want Run to have turned it back on", flags["notify-keyspace-events"], err)
	}
}
