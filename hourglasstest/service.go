package hourglasstest

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// ServiceURL returns the URL of a real service for an integration test: the
// value of env (e.g. HOURGLASS_TEST_REDIS_URL) or else def, the service's
// standard loopback address. If nothing accepts a TCP connection at its
// host:port, the test is skipped with a message saying how to start it, or
// fails when CI=true (CI must have started every service the tests need).
func ServiceURL(t testing.TB, name, env, def string) string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("%s: %s=%q is not a URL with a host", name, env, raw)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		msg := name + " is not reachable at " + u.Host + " (" + err.Error() + "); start it or set " + env
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	conn.Close()
	return raw
}
