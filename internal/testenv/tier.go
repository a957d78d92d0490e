package testenv

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A Tier is a set of tests that need the same of the machine and of the
// run. A test states its tier with Require (or EveryCase); one that states none
// is in the Default tier. HOURGLASS_TEST_TIER (TierEnv) selects the tiers a
// run covers, comma-separated; unset, it is "default", what the README's
// `go test -race ./...` runs. A test outside the selected tiers skips with a
// message naming the variable that runs it.
type Tier string

const (
	// Default is what `go test -race ./...` runs: every test that states no
	// other tier, on the developer's store and delay mechanism (SQLite and
	// the wheel unless HOURGLASS_TEST_STORE or HOURGLASS_TEST_DELAY say
	// otherwise).
	Default Tier = "default"
	// Processes is the tests that run several processes of the built
	// binary with time bounds (clusters, takeovers after a SIGKILL, sources
	// on three nodes), and the SIGKILL tests that read back 10,000 timers or
	// events. Run them without -race: the binary they start is built
	// without it, and under it only the test's own side is slower, which
	// checks nothing more and eats the bounds.
	Processes Tier = "processes"
	// Brokers is the tests of the Processes kind (nodes of the built
	// binary, time bounds, without -race) whose nodes use the shared
	// brokers (Redis, RabbitMQ, NATS), which the Outage tier stops: a
	// separate tier so that the other Processes tests can run beside the
	// Outage tier and these not.
	Brokers Tier = "brokers"
	// Matrix is the end-to-end tests (those that call EveryCase) on every
	// store and every delay mechanism other than the default ones: each
	// mechanism on SQLite, each server store on the wheel. The Kafka case
	// needs a broker at HOURGLASS_TEST_KAFKA_URL or 127.0.0.1:9092.
	Matrix Tier = "matrix"
	// Outage is the tests that stop and restart a shared service (Redis,
	// RabbitMQ, NATS): run them with -p 1, and nothing that uses those
	// services beside them (the Brokers tier, the Matrix tier's mechanisms).
	Outage Tier = "outage"
	// Full is the tests at full size that the Default tier runs smaller
	// (the shops' orders tables at 200 orders a second for 10 s and a burst
	// of 20,000, the event sinks' outage for 30 s): run them without -race.
	Full Tier = "full"
)

// TierEnv is the environment variable that selects the tiers a run covers.
const TierEnv = "HOURGLASS_TEST_TIER"

// Tiers lists every tier, the default first.
func Tiers() []Tier { return []Tier{Default, Processes, Brokers, Matrix, Outage, Full} }

// Selected reports whether the run covers tier: whether TierEnv lists it,
// or, unset or empty, whether tier is Default.
func Selected(tier Tier) bool {
	v := strings.TrimSpace(os.Getenv(TierEnv))
	if v == "" {
		return tier == Default
	}
	for _, name := range strings.Split(v, ",") {
		if Tier(strings.TrimSpace(name)) == tier {
			return true
		}
	}
	return false
}

// checkTierEnv fails t when TierEnv names a tier that does not exist: a
// typo would otherwise skip every test of the run.
func checkTierEnv(t testing.TB) {
	t.Helper()
	for _, name := range strings.Split(os.Getenv(TierEnv), ",") {
		if name = strings.TrimSpace(name); name != "" && !slices.Contains(Tiers(), Tier(name)) {
			t.Fatalf("%s=%q: %q is not a tier (want some of %v)", TierEnv, os.Getenv(TierEnv), name, Tiers())
		}
	}
}

// Require skips t unless the run covers one of tiers, with a message that
// says how to run it; it fails t when TierEnv names an unknown tier. A
// test that passes it has stated its tier: the helpers that give a
// Default-tier test its services (RequireDefault) let it and its subtests
// through in any run.
func Require(t testing.TB, tiers ...Tier) {
	t.Helper()
	checkTierEnv(t)
	for _, tier := range tiers {
		if Selected(tier) {
			admit(t.Name(), Case{})
			return
		}
	}
	names := make([]string, len(tiers))
	for i, tier := range tiers {
		names[i] = string(tier)
	}
	t.Skipf("in the %s tier: run it with %s=%s (docs/testing.md)", strings.Join(names, ", "), TierEnv, names[0])
}

// RequireDefault skips t when the run does not cover the Default tier,
// unless t (or the test it is a subtest of) stated its tier with Require
// or EveryCase. The helpers every Default-tier test goes through call it
// (ServiceURL, storetest.URL, the conformance suites, the test servers), so
// a run of one tier does not run the whole package's Default-tier tests
// again; a test that needs none of them costs next to nothing.
func RequireDefault(t testing.TB) {
	t.Helper()
	if _, ok := admitted(t.Name()); ok {
		return
	}
	Require(t, Default)
}

// Case is one store and delay mechanism an end-to-end test runs on; a test
// with one dimension only leaves the other "".
type Case struct{ Store, Delay string }

// name is the subtest name of c: "postgres", "redis" or "postgres+redis".
func (c Case) name() string {
	switch {
	case c.Store == "":
		return c.Delay
	case c.Delay == "":
		return c.Store
	}
	return c.Store + "+" + c.Delay
}

// StoreEnv and DelayEnv name the store and the delay mechanism a
// developer's run uses (the Default tier, and any test tier's own case).
const (
	StoreEnv = "HOURGLASS_TEST_STORE"
	DelayEnv = "HOURGLASS_TEST_DELAY"
)

// EveryCase runs test on the stores and delay mechanisms it must pass on.
// stores[0] and delays[0] are the defaults; either list may be nil when
// the test has no such dimension. When the run covers tier, test runs on
// t itself, on the developer's case (StoreEnv, DelayEnv, else the
// defaults); when it covers Matrix, test runs again as a subtest per other
// case: each other delay mechanism on the default store, each other store
// on the default mechanism. Inside test, Store and Delay say the case. A
// run that covers neither skips t.
func EveryCase(t *testing.T, tier Tier, stores, delays []string, test func(t *testing.T)) {
	t.Helper()
	checkTierEnv(t)
	own, matrix := Selected(tier), Selected(Matrix)
	if !own && !matrix {
		Require(t, tier, Matrix)
		return
	}
	if own {
		admit(t.Name(), Case{})
		test(t)
	}
	if !matrix {
		return
	}
	var cases []Case
	def := Case{Store: first(stores), Delay: first(delays)}
	for _, d := range rest(delays) {
		cases = append(cases, Case{Store: def.Store, Delay: d})
	}
	for _, s := range rest(stores) {
		cases = append(cases, Case{Store: s, Delay: def.Delay})
	}
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			admit(t.Name(), c)
			test(t)
		})
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func rest(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s[1:]
}

// Store returns the store t runs on: its case in EveryCase, else StoreEnv's,
// else def.
func Store(t testing.TB, def string) string {
	if c, ok := admitted(t.Name()); ok && c.Store != "" {
		return c.Store
	}
	if v := os.Getenv(StoreEnv); v != "" {
		return v
	}
	return def
}

// Delay returns the delay mechanism t runs on: its case in EveryCase, else
// DelayEnv's, else def.
func Delay(t testing.TB, def string) string {
	if c, ok := admitted(t.Name()); ok && c.Delay != "" {
		return c.Delay
	}
	if v := os.Getenv(DelayEnv); v != "" {
		return v
	}
	return def
}

// stated holds, by test name, the tests that stated their tier, with the
// EveryCase case each runs (zero outside a case of EveryCase).
var stated sync.Map // string → Case

func admit(name string, c Case) { stated.Store(name, c) }

// admitted returns the case of name or of the nearest test it is a subtest
// of that stated its tier.
func admitted(name string) (Case, bool) {
	for {
		if c, ok := stated.Load(name); ok {
			return c.(Case), true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return Case{}, false
		}
		name = name[:i]
	}
}
