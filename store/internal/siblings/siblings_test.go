package siblings

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func TestTracker(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	ttl := 10 * time.Second
	alone := hourglass.ClusterState{Nodes: []hourglass.Node{{ID: "a"}}}
	two := hourglass.ClusterState{Nodes: []hourglass.Node{{ID: "a"}, {ID: "b"}}}

	var tr Tracker
	tr.Observe(two, ttl, now)
	if tr.Shared(now) {
		t.Fatal("shared before the store value's node heartbeated: want not (its own id is unknown)")
	}
	tr.Heartbeat("a")
	tr.Observe(alone, ttl, now)
	if tr.Shared(now) {
		t.Fatal("shared with only its own node live")
	}
	tr.Observe(two, ttl, now)
	if !tr.Shared(now) {
		t.Fatal("not shared with another live node")
	}
	if tr.Shared(now.Add(ttl)) {
		t.Fatal("shared a TTL after the last read: want not (the answer is stale)")
	}
	tr.Observe(alone, ttl, now)
	if tr.Shared(now) {
		t.Fatal("still shared after a read that found the node alone")
	}

	var many Tracker
	many.Heartbeat("a")
	many.Heartbeat("b") // two nodes through one store value: one writer
	many.Observe(two, ttl, now)
	if many.Shared(now) {
		t.Fatal("shared with nodes that share one store value: want not")
	}
}
