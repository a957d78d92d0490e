// Package siblings tells a store value whether other live nodes share its
// database, from the cluster reads its node makes through it: its
// Heartbeat names the node, and each ClusterState lists the live nodes.
// The group commit gathers writes only while others share the database
// (writer.Config.Shared): each node's commit costs the shared server the
// same, and a node among several gets only a share of the clients.
package siblings

import (
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// Tracker is what the last cluster read said. Its zero value knows
// nothing and reports no siblings. Safe for concurrent use.
type Tracker struct {
	mu     sync.Mutex
	self   string // the node id heartbeated through this store value
	many   bool   // several were: nodes sharing one store value
	shared bool   // the last read listed another live node
	until  time.Time
}

// Heartbeat records the id of a node that heartbeats through the store
// value.
func (t *Tracker) Heartbeat(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.self == "":
		t.self = id
	case t.self != id:
		t.many = true
	}
}

// Observe takes a cluster read's answer at now, trusted for ttl: a node
// whose cluster loop stopped reading goes back to no siblings once the
// others' heartbeats would have expired.
func (t *Tracker) Observe(st hourglass.ClusterState, ttl time.Duration, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shared, t.until = false, now.Add(ttl)
	if t.self == "" || t.many {
		return
	}
	for _, n := range st.Nodes {
		if n.ID != t.self {
			t.shared = true
			return
		}
	}
}

// Shared reports whether, at now, the last read (still trusted) listed a
// live node other than this store value's.
func (t *Tracker) Shared(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shared && now.Before(t.until)
}
