// Package testenv is what hourglass's tests need from their environment:
// the tier a run covers and the store and delay mechanism it runs on
// (Require, EveryCase, Store, Delay), a real service to talk to (ServiceURL), a proxy that can cut a client off it
// (Proxy), and one way to wait for a condition that comes true in real time
// (Eventually), or for an instant of the wall clock that a test against real
// processes is paced by (Until, Phase), and what a test process builds once
// for all its tests (OnceEach).
//
// It imports only the standard library, so any package's tests (and the
// test-support packages under store/) may use it without importing the
// conformance suites in hourglasstest.
package testenv

import (
	"context"
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
// A Default-tier test is skipped in a run that does not cover that tier
// (RequireDefault).
func ServiceURL(t testing.TB, name, env, def string) string {
	t.Helper()
	RequireDefault(t)
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

// Poll is how often Eventually evaluates its condition.
const Poll = 5 * time.Millisecond

// Eventually waits until cond returns true, evaluating it at once and then
// every Poll, and fails the test (t.Fatalf, so it must be called from the
// test's goroutine) with "what: not within d" when within passes first.
// It is for a condition that comes true in real time: another process, a
// database, a broker, or a goroutine the test cannot signal from. Code that
// reads an injected clock is driven with hourglasstest.Clock instead.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyEvery(t, within, Poll, what, cond)
}

// EventuallyEvery is Eventually evaluating cond every every instead of every
// Poll: for a condition that costs a query of a database or of another
// process's API, where polling every 5 ms would load what the test measures.
func EventuallyEvery(t testing.TB, within, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		<-tick.C
	}
}

// Until waits until the wall clock reaches at, or ctx ends, and reports
// whether at was reached. It paces a test's load against real processes
// (the i-th request at start + i×interval) and its scenario's steps (the
// kill at start + 3 s): those processes run on the wall clock, which no fake
// clock reaches. A time already past returns at once.
func Until(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Phase lets a scenario against real processes run for d (load flowing
// while a node is down, deadlines passing while nothing serves them),
// logging what it waits for so a failure's log shows the scenario's
// timeline. It fails the test if the test's context ends first. Use it only
// where the wait is the scenario itself; a wait for something to happen is
// Eventually.
func Phase(t testing.TB, d time.Duration, what string) {
	t.Helper()
	t.Logf("phase: %s (%s)", what, d)
	if !Until(t.Context(), time.Now().Add(d)) {
		t.Fatalf("phase %q: the test ended first", what)
	}
}
