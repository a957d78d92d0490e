package processtest

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

// clusterSink is the --event-sink every node of a cluster test shares (a
// Redis stream of the test's own, deleted after it), and its checks
// (issue #23): while the cluster is steady each event is published once,
// by the node owning its partition, no duplicate; after churn every event
// the database holds reaches the stream, in order per order after
// dropping duplicates, whichever node wrote it and whoever owned its
// partition. TestClusterWebhooks runs it beside the webhooks, on the same
// SIGKILL, restart and SIGTERM (it was TestClusterEventSinks, on a
// cluster of its own).
type clusterSink struct {
	base, stream string
	rdb          *goredis.Client
	steady       int // messages on the stream at the steady check
}

func newClusterSink(t *testing.T) *clusterSink {
	base := testenv.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
	opt, err := goredis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterSink{base: base, stream: fmt.Sprintf("hgsinkcluster_%d", time.Now().UnixNano()%1e12), rdb: goredis.NewClient(opt)}
	t.Cleanup(func() { s.rdb.Del(context.Background(), s.stream); s.rdb.Close() })
	return s
}

// args are the serve flags that make a node publish to the sink.
func (s *clusterSink) args() []string {
	return []string{"--event-sink", s.base + "?stream=" + url.QueryEscape(s.stream)}
}

func (s *clusterSink) read(t *testing.T) []busMsg { return readStream(t, s.rdb, s.stream) }

// checkSteady checks, after the load ran on the steady cluster, that
// something was published and nothing twice.
func (s *clusterSink) checkSteady(t *testing.T) {
	steady := s.read(t)
	s.steady = len(steady)
	if _, n := firstsByKey(steady); n != 0 {
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
		t.Errorf("steady cluster: nothing on the stream after the load ran")
	}
}

// checkAll checks, after the load stopped and the verdict was read, that
// every event of the verdict reaches the stream within 60 s, each order's
// in order.
func (s *clusterSink) checkAll(t *testing.T, verdict *nodes.Verdict) {
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
		got = s.read(t)
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
	// In order per key: an order's id, or a timer's key (its events carry
	// it in their body; the key field says it).
	firsts, dups := firstsByKey(got)
	for id, evs := range verdict.Events {
		var want []string
		for _, e := range evs {
			want = append(want, e.ID)
		}
		key := strconv.FormatInt(id, 10)
		if _, ok := firsts[key]; !ok {
			continue // a timer: keyed by its key, checked by count above
		}
		if strings.Join(firsts[key], ",") != strings.Join(want, ",") {
			t.Errorf("order %d: %v on the stream, want %v in this order", id, firsts[key], want)
		}
	}
	t.Logf("event sink: %d events of %d orders and timers on the stream; %d messages, %d duplicates after a SIGKILL, a restart and a SIGTERM (none in the steady %d before)",
		total, len(verdict.Events), len(got), dups, s.steady)
}
