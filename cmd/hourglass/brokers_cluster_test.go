package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/hourglasstest/nodes"
	"github.com/hourglass/hourglass/store"
)

// TestClusterBrokers (issue 18): each broker mechanism on 1 and on 3 nodes
// of the built binary on one PostgreSQL database, creates and timer arms
// round-robin at a steady rate. Every order and timer closes or fires once,
// none early (the verdict), the sweeper takes none of them on any node
// (each node consumes only the timers of the partitions it owns), and the
// p99 lateness on 3 nodes is within 2x one node's (plus 25 ms, so that a
// few ms at p99 on a shared machine does not decide it). Kafka is left out:
// its due tier is not partitioned by owner yet. It takes about 1.5 min per
// mechanism and compares lateness, so it runs only when
// HOURGLASS_TEST_BROKERS names the mechanisms (comma-separated, e.g.
// redis,rabbitmq,nats); the conformance suite's OwnersShareThePartitions
// checks the same ownership in every go test run.
func TestClusterBrokers(t *testing.T) {
	v := os.Getenv("HOURGLASS_TEST_BROKERS")
	if v == "" {
		t.Skip("set HOURGLASS_TEST_BROKERS=redis,rabbitmq,nats to run brokers on 1 and 3 nodes of the built binary (about 1.5 min each)")
	}
	mechanisms := strings.Split(v, ",")
	for _, m := range mechanisms {
		t.Run(m, func(t *testing.T) {
			var p99 [4]time.Duration
			for _, n := range []int{1, 3} {
				t.Run(fmt.Sprintf("%d-nodes", n), func(t *testing.T) {
					p99[n] = brokerRun(t, m, n)
				})
			}
			if p99[1] > 0 && p99[3] > 2*p99[1]+25*time.Millisecond {
				t.Errorf("p99 lateness of orders on 3 nodes %s, on 1 node %s: want at most 2x", p99[3], p99[1])
			}
		})
	}
}

// brokerRun runs the load on n nodes with the delay mechanism m and
// returns the p99 lateness of the orders closed.
func brokerRun(t *testing.T, m string, n int) time.Duration {
	const ttl = 2 * time.Second
	ns := fmt.Sprintf("hgt-brokers-%s-%d-%d", m, n, time.Now().UnixNano()%1e9)
	s := setupCluster(t, store.KindPostgres, n, ttl, "--delay", m, "--delay-namespace", ns)
	ctx := t.Context()
	load, err := s.cluster.StartLoad(ctx, nodes.LoadConfig{Rate: 60, TimeoutMin: 2 * time.Second, TimeoutMax: 3 * time.Second, TimerRate: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	time.Sleep(10 * time.Second)
	ledger := load.Stop()
	verdict := judge(t, s.dbURL, ledger, 2*time.Second)
	var swept, timersSwept, failures, noops float64
	for _, nd := range s.cluster.Nodes() {
		samples, err := nd.Samples(ctx)
		if err != nil {
			t.Fatal(err)
		}
		swept += samples["hourglass_sweeper_recovered_total"]
		timersSwept += samples[`hourglass_timers_fired_total{by="sweeper"}`]
		failures += samples["hourglass_scheduler_failures_total"]
		noops += samples["hourglass_close_noops_total"]
	}
	t.Logf("--delay %s on %d nodes: %g scheduler failures, %g no-op closes", m, n, failures, noops)
	if swept > 0 || timersSwept > 0 {
		t.Errorf("--delay %s on %d nodes: the sweeper closed %g orders and fired %g timers; want 0", m, n, swept, timersSwept)
	}
	t.Logf("--delay %s on %d nodes: orders p50 %s p99 %s max %s; timers p50 %s p99 %s max %s; swept %g orders, %g timers",
		m, n, verdict.LatenessP50, verdict.LatenessP99, verdict.LatenessMax, verdict.TimerLatenessP50, verdict.TimerLatenessP99, verdict.TimerLatenessMax, swept, timersSwept)
	return verdict.LatenessP99
}
