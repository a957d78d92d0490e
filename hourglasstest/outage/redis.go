package outage

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
)

// RestartRedis stops the Redis at addr (host:port) without saving, keeps it
// down for 2 s, starts it again with this machine's settings (no
// persistence, as .ci/run starts it) and returns once it answers PING.
func RestartRedis(t *testing.T, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	// The connection drops as Redis exits: the command's error is expected.
	_ = exec.Command("redis-cli", "-h", host, "-p", port, "shutdown", "nosave").Run()
	waitRedis(t, host, port, false)
	// Down for 2 s. Outage runs off the test's goroutine: no testenv.Phase.
	testenv.Until(t.Context(), time.Now().Add(2*time.Second))
	out, err := exec.Command("redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", "/var/lib/redis", "--logfile", "/var/log/redis/ci.log").CombinedOutput()
	if err != nil {
		t.Fatalf("start redis-server: %v: %s", err, out)
	}
	waitRedis(t, host, port, true)
}

// waitRedis polls PING every 50 ms until it answers (up) or fails (down),
// for 30 s. It may run off the test's goroutine (in Config.Outage), so it
// waits on a ticker rather than with testenv.Eventually.
func waitRedis(t *testing.T, host, port string, up bool) {
	t.Helper()
	giveUp := time.NewTimer(30 * time.Second)
	defer giveUp.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		out, err := exec.Command("redis-cli", "-h", host, "-p", port, "ping").Output()
		answered := err == nil && strings.TrimSpace(string(out)) == "PONG"
		if answered == up {
			return
		}
		select {
		case <-poll.C:
		case <-giveUp.C:
			t.Fatalf("Redis at %s:%s did not go %s within 30 s", host, port, map[bool]string{true: "up", false: "down"}[up])
		}
	}
}
