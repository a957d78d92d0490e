package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/hourglasstest/nodes"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestClusterEventSinks (issue #23): three nodes on one database, each with
// the same --event-sink (a Redis stream of the test's own), take creates,
// pays and timer arms round-robin. While the cluster is steady each event
// is published once: by the node owning its partition, no duplicate. Then
// one node is SIGKILLed and restarted and another SIGTERMed and left down:
// every event the database holds reaches the stream, in order per order or
// timer after dropping duplicates, whichever node wrote it and whoever
// owned its partition; the duplicates the takeovers cost are counted.
func TestClusterEventSinks(t *testing.T) {
	const ttl = 2 * time.Second
	base := testenv.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
	for _, kind := range sharedStores {
		t.Run(kind, func(t *testing.T) {
			stream := fmt.Sprintf("hgsinkcluster_%d", time.Now().UnixNano()%1e12)
			opt, err := goredis.ParseURL(base)
			if err != nil {
				t.Fatal(err)
			}
			rdb := goredis.NewClient(opt)
			t.Cleanup(func() { rdb.Del(context.Background(), stream); rdb.Close() })
			read := func() []busMsg {
				msgs, err := rdb.XRange(t.Context(), stream, "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				out := make([]busMsg, len(msgs))
				for i, m := range msgs {
					id, _ := m.Values["id"].(string)
					key, _ := m.Values["key"].(string)
					out[i] = busMsg{id: id, key: key}
				}
				return out
			}
			dups := func(got []busMsg) int {
				seen := map[string]bool{}
				n := 0
				for _, m := range got {
					if seen[m.id] {
						n++
					}
					seen[m.id] = true
				}
				return n
			}
			s := setupCluster(t, kind, 3, ttl, "--event-sink", base+"?stream="+url.QueryEscape(stream))
			c := s.cluster
			ctx := t.Context()
			load, err := c.StartLoad(ctx, nodes.LoadConfig{Rate: 60, TimeoutMin: time.Second, TimeoutMax: 3 * time.Second, TimerRate: 30})
			if err != nil {
				t.Fatal(err)
			}
			defer load.Stop()
			testenv.Phase(t, 4*time.Second, "the steady cluster publishes under load")
			steady := read()
			if n := dups(steady); n != 0 {
				count := map[string]int{}
				var which []string
				for _, m := range steady {
					if count[m.id]++; count[m.id] == 2 {
						which = append(which, m.id+" (key "+m.key+")")
					}
				}
				t.Errorf("steady cluster: %d of %d messages are duplicates, want 0 (one node per partition): %v", n, len(steady), which)
			}
			if len(steady) == 0 {
				t.Errorf("steady cluster: nothing on the stream after 4 s of load")
			}

			if err := c.Node(1).Kill(); err != nil {
				t.Fatal(err)
			}
			testenv.Phase(t, ttl+time.Second, "the killed node stays down past its leases' expiry")
			if err := c.Node(1).Restart(ctx, false); err != nil {
				t.Fatal(err)
			}
			testenv.Phase(t, 2*time.Second, "the load runs on three nodes again")
			if err := c.Node(2).Term(); err != nil {
				t.Fatal(err)
			}
			testenv.Phase(t, ttl+2*time.Second, "the load runs on the two nodes left")
			ledger := load.Stop()
			verdict := judge(t, s.dbURL, ledger, ttl+time.Second)

			total := 0
			for _, evs := range verdict.Events {
				total += len(evs)
			}
			if total == 0 {
				t.Fatal("no event was written: the load did nothing")
			}
			var got []busMsg
			missing := -1
			testenv.EventuallyEvery(t, 60*time.Second, 250*time.Millisecond, fmt.Sprintf("every one of the %d events on the stream after the load stopped", total), func() bool {
				got = read()
				seen := map[string]bool{}
				for _, m := range got {
					seen[m.id] = true
				}
				n := 0
				for _, evs := range verdict.Events {
					for _, e := range evs {
						if !seen[e.ID] {
							n++
						}
					}
				}
				if n != missing {
					missing = n
					t.Logf("%d of %d events not on the stream", missing, total) // the last one logged is the count on a failure
				}
				return missing == 0
			})
			// In order per key: an order's id, or a timer's key (its
			// events carry it in their body; the key field says it).
			firsts := map[string][]string{}
			seen := map[string]bool{}
			for _, m := range got {
				if !seen[m.id] {
					seen[m.id] = true
					firsts[m.key] = append(firsts[m.key], m.id)
				}
			}
			for id, evs := range verdict.Events {
				var want []string
				for _, e := range evs {
					want = append(want, e.ID)
				}
				key := strconv.FormatInt(id, 10)
				if _, ok := firsts[key]; !ok {
					continue // a timer: keyed by its key, checked by count below
				}
				if strings.Join(firsts[key], ",") != strings.Join(want, ",") {
					t.Errorf("order %d: %v on the stream, want %v in this order", id, firsts[key], want)
				}
			}
			t.Logf("%s: %d events of %d orders and timers on the stream; %d messages, %d duplicates after a SIGKILL, a restart and a SIGTERM (none in the steady %d before)",
				kind, total, len(verdict.Events), len(got), dups(got), len(steady))
		})
	}
}
