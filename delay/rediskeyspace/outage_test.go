package rediskeyspace_test

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/rediskeyspace"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/hourglasstest/outage"
)

// TestOutage stops the real Redis (shutdown nosave: this machine runs it
// without persistence) for about 2 s mid-load and starts it again: the keys
// and the notify-keyspace-events setting are gone, and events due while it
// was down are never published. Run must turn the events back on; the
// sweeper closes what was lost; nothing may be closed twice.
func TestOutage(t *testing.T) {
	outage.Enabled(t)
	raw, c := setup(t)
	ns := hourglasstest.Namespace(t)
	outage.Run(t, outage.Config{
		Open: func(t *testing.T, _ hourglass.Store) hourglass.Scheduler {
			return open(t, rediskeyspace.Config{URL: raw, Namespace: ns}, c)
		},
		Outage: func(t *testing.T) {
			keys, _ := c.Keys(context.Background(), ns+":order:*").Result()
			t.Logf("timer keys lost with the restart: %d", len(keys))
			restartRedis(t, c)
			flags, err := c.ConfigGet(context.Background(), "notify-keyspace-events").Result()
			t.Logf("notify-keyspace-events after the restart: %q %v", flags["notify-keyspace-events"], err)
		},
	})
	flags, err := c.ConfigGet(context.Background(), "notify-keyspace-events").Result()
	if err != nil || flags["notify-keyspace-events"] == "" {
		t.Fatalf("notify-keyspace-events at the end: %q %v; want Run to have turned it back on", flags["notify-keyspace-events"], err)
	}
}

// restartRedis stops Redis without saving, keeps it down for 2 s, starts it
// again with this machine's settings and returns once it answers PING.
func restartRedis(t *testing.T, c *goredis.Client) {
	t.Helper()
	host, port, err := net.SplitHostPort(c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	// The connection drops as Redis exits: the command's error is expected.
	_ = exec.Command("redis-cli", "-h", host, "-p", port, "shutdown", "nosave").Run()
	waitPing(t, c, false)
	time.Sleep(2 * time.Second)
	out, err := exec.Command("redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", "/var/lib/redis", "--logfile", "/var/log/redis/ci.log").CombinedOutput()
	if err != nil {
		t.Fatalf("start redis-server: %v: %s", err, out)
	}
	waitPing(t, c, true)
}

// waitPing polls PING until it answers (up) or fails (down), for 30 s.
func waitPing(t *testing.T, c *goredis.Client, up bool) {
	t.Helper()
	limit := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if (err == nil) == up {
			return
		}
		if time.Now().After(limit) {
			t.Fatalf("Redis did not go %s within 30 s (last PING: %v)", map[bool]string{true: "up", false: "down"}[up], err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
