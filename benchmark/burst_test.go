package benchmark

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/wheel"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/storetest"
)

// TestBurstWebhooksWhileClosesTrickle (issue 18): 20,000 orders due at one
// instant, 5 webhooks subscribed to order.closed, and 50 other orders a
// second closing all along: every burst order's order.closed reaches every
// webhook (its first attempt) within 10 s of the burst's last close, though
// the closes never pause. The store is HOURGLASS_TEST_STORE's (SQLite by
// default). It is a bound on delivery throughput on a shared machine:
// 100,000 first attempts took 6.4-7.2 s on SQLite, 10.1 s on PostgreSQL and
// 9.6-10.9 s on MariaDB on a 2-core machine, where the servers' runs keep
// both cores busy (docs/benchmarks/webhooks.md). So it runs only with
// HOURGLASS_TEST_BURST_WEBHOOKS=1, not in CI, and never under the race
// detector, which slows the close path and the deliveries several times.
func TestBurstWebhooksWhileClosesTrickle(t *testing.T) {
	if os.Getenv("HOURGLASS_TEST_BURST_WEBHOOKS") == "" {
		t.Skip("set HOURGLASS_TEST_BURST_WEBHOOKS=1: a time bound on 100,000 deliveries (met on SQLite, at the bound on PostgreSQL and MariaDB on 2 cores: docs/benchmarks/webhooks.md)")
	}
	if raceEnabled {
		t.Skip("a bound on delivery lag, run without -race")
	}
	if testing.Short() {
		t.Skip("a 20,000-order burst; skipped with -short")
	}
	sys := System{Name: "wheel", Feed: hourglass.FeedWindow, Open: func(context.Context, hourglass.Store) (hourglass.Scheduler, error) {
		return wheel.New(wheel.Config{}), nil
	}}
	w := BurstWorkload{Orders: 20_000, Webhooks: 5, HookEvents: []hourglass.EventType{hourglass.EventOrderClosed}, ProbeRate: 20, TrickleRate: 50}
	url := "" // RunBurst makes a scratch SQLite database
	if storetest.Kind() != store.KindSQLite {
		url = storetest.URL(t) // the server; RunBurst makes a scratch database on it
	}
	res, err := RunBurst(t.Context(), sys, url, w, nil)
	if err != nil {
		t.Fatalf("RunBurst: %v", err)
	}
	t.Logf("drain %s, late p99 %s, swept %d, %d other orders closed meanwhile; first attempts of every burst delivery %s after the last close; all delivered %s after the deadline",
		res.Drain, res.LateP99, res.Swept, res.Trickled, res.FirstAttempts, res.DeliveredAll)
	if res.Trickled == 0 {
		t.Errorf("no other order closed during the burst: the test tested nothing")
	}
	switch {
	case res.FirstAttempts < 0:
		t.Errorf("the burst's order.closed deliveries did not all have a first attempt within a minute of its last close")
	case res.FirstAttempts > 10*time.Second:
		t.Errorf("the burst's order.closed deliveries had their first attempts %s after its last close; want within 10 s", res.FirstAttempts)
	}
}
