package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// TestLiveNodesAcrossSkewedServers: through a server 2 s ahead, the
// heartbeats written through the others look 2 s old, older than a 1 s
// TTL; aged on the nodes' own clocks they are live, and a node that
// stopped 3 s ago is not. On one server no correction applies.
func TestLiveNodesAcrossSkewedServers(t *testing.T) {
	t.Parallel()
	s := time.Second
	now := time.Unix(1_800_000_000, 0) // server 3's clock, 2 s ahead
	node := func(id, db string, off, ago time.Duration) hourglass.Node {
		return hourglass.Node{ID: id, DBNode: db, ClockOffset: off, OffsetKnown: true, LastSeen: now.Add(-ago)}
	}
	st := hourglass.ClusterState{Now: now, Nodes: []hourglass.Node{
		node("a", "db1", 0, 2*s+100*time.Millisecond),       // live: 100ms ago on the nodes' clocks
		node("b", "db2", 0, 5*s),                            // stopped 3 s ago
		node("c", "db3", 0, 0),                              // self: its row has the offset before the jump
		node("d", "db3", 2*s, 200*time.Millisecond),         // another node of server 3
		{ID: "e", DBNode: "db1", LastSeen: now.Add(-2 * s)}, // no offset yet: aged as written
	}}
	got := liveNodes(st, "c", 2*s, true, s)
	var ids []string
	for _, n := range got {
		ids = append(ids, n.ID)
	}
	if !slices.Equal(ids, []string{"a", "c", "d"}) {
		t.Errorf("live = %v, want a, c (self) and d", ids)
	}
	if self := got[1]; self.ClockOffset != 2*s || !self.OffsetKnown {
		t.Errorf("self = %+v, want this tick's offset 2s", self)
	}
	if ahead := aheadNodes(got, 100*time.Millisecond); !ahead["c"] || !ahead["d"] || ahead["a"] {
		t.Errorf("ahead = %v, want c and d (server 3), not a", ahead)
	}

	// One server (PostgreSQL): the nodes' own clocks differ, the rows are
	// written by one clock and aged by it.
	one := hourglass.ClusterState{Now: now, Nodes: []hourglass.Node{
		node("a", "", -2*s, 500*time.Millisecond), node("b", "", 2*s, 500*time.Millisecond), node("c", "", 0, 3*s),
	}}
	got = liveNodes(one, "a", -2*s, true, s)
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" {
		t.Errorf("one server: live = %+v, want a and b", got)
	}
	if ahead := aheadNodes(got, 100*time.Millisecond); len(ahead) != 0 {
		t.Errorf("one server: ahead = %v, want none", ahead)
	}
}
