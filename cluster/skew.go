package cluster

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
)

// Clock skew between database servers. Deadlines and lease expiries are
// written by one database server's clock (the NOW(3) of the Galera node a
// transaction ran on) and compared with another's, so on a database of
// several servers (Galera) a server whose clock is Δ ahead closes the
// orders written through the others Δ early, and takes leases Δ early.
//
// No node can read two servers' clocks at once, but each measures the
// offset of its own server's clock from its own clock (the heartbeat's
// lower bound, see Membership.Clock) and publishes it with its heartbeat
// (hourglass.Node.ClockOffset), beside the server it reached (DBNode). For
// nodes a and b on servers A and B:
//
//	offset(a) - offset(b) = (clock(A) - clock(B)) - (clock(a) - clock(b))
//
// so the difference of their offsets is the servers' skew when the nodes'
// own clocks agree (they are NTP-synchronised: an error of the nodes'
// clocks shows as skew of the servers'), plus the measurements' error (each
// a lower bound, short of the truth by at most a round trip).

// What a node does about it. A node whose server's clock is ahead of
// another's by more than Config.MaxClockSkew closes orders (and fires
// timers) early: the deadlines written through the others are compared with
// its later clock. So it is fenced: it gives its leases up and takes no
// share (the others leave it out of theirs, Shares), until the clocks agree
// again. The nodes of the server furthest behind keep working: they close
// at worst late by the skew (the deadlines written through a server ahead),
// never early. A server behind is not fenced: its nodes close on time or
// late. /readyz answers 503 on a fenced node (its pays would be refused
// early too), and every node reports the skew (the db_clock_skew alert).

// MaxClockSkewDefault is Config.MaxClockSkew's default.
const MaxClockSkewDefault = 100 * time.Millisecond

// SkewWindow bounds the skew a node can see: the nodes' rows are read this
// much further back than LeaseTTL. Liveness, too, depends on the clocks:
// through a server ahead by more than LeaseTTL the others' heartbeats look
// older than it, and the nodes dead (and the skew unseen: that node would
// take every lease). So a node reads the rows of the last LeaseTTL +
// SkewWindow and compares the times of heartbeats written through another
// server on the nodes' own clocks: the last_seen less the writer's offset
// against now less its own (liveNodes).
const SkewWindow = 10 * time.Minute

// ClockSkew is the largest difference, as ClockSkewOf measures it, between
// the clocks of two database servers the live nodes reach.
type ClockSkew struct {
	// Skew is how far the clock of the server reached by Ahead is ahead of
	// the one reached by Behind; 0 when every node reaches one server (or
	// fewer than two have published an offset).
	Skew time.Duration
	// Ahead and Behind are the nodes of the servers furthest apart (zero
	// when Skew is 0).
	Ahead, Behind hourglass.Node
}

// ClockSkewObserver is an optional ability of an Observer: it is told the
// skew between the database servers (ClockSkewOf of the live nodes) after
// each tick that read the cluster's state.
type ClockSkewObserver interface {
	DBClockSkew(d time.Duration)
}

// ClockSkewOf returns the largest difference of the published clock
// offsets of two nodes that reach different database servers (DBNode).
// Nodes of one server are not compared: their offsets differ only by their
// own clocks, which the corrected clock (Membership.Clock) makes harmless.
// Nodes without an offset (OffsetKnown false) are left out. It costs
// O(nodes + servers²) and is safe for concurrent use.
func ClockSkewOf(nodes []hourglass.Node) ClockSkew {
	type extremes struct{ lo, hi hourglass.Node }
	servers := map[string]*extremes{}
	var order []string // deterministic: servers in the order first seen
	for _, n := range nodes {
		if !n.OffsetKnown {
			continue
		}
		e, ok := servers[n.DBNode]
		if !ok {
			servers[n.DBNode] = &extremes{n, n}
			order = append(order, n.DBNode)
			continue
		}
		if n.ClockOffset < e.lo.ClockOffset {
			e.lo = n
		}
		if n.ClockOffset > e.hi.ClockOffset {
			e.hi = n
		}
	}
	var out ClockSkew
	for _, a := range order {
		for _, b := range order {
			if a == b {
				continue
			}
			if d := servers[a].hi.ClockOffset - servers[b].lo.ClockOffset; d > out.Skew {
				out = ClockSkew{Skew: d, Ahead: servers[a].hi, Behind: servers[b].lo}
			}
		}
	}
	return out
}

// ClockSkew returns ClockSkewOf the live nodes of the last cluster state
// Run read (every Tick): zero before the first. Safe for concurrent use.
func (m *Membership) ClockSkew() ClockSkew {
	m.mu.Lock()
	nodes := m.last.Nodes
	m.mu.Unlock()
	return ClockSkewOf(nodes)
}

// aheadNodes returns the ids of the nodes whose published offset exceeds
// the smallest offset published through another database server by more
// than max: their server's clock is ahead (as ClockSkewOf measures it).
func aheadNodes(nodes []hourglass.Node, max time.Duration) map[string]bool {
	lowest := map[string]time.Duration{} // by server
	for _, n := range nodes {
		if lo, ok := lowest[n.DBNode]; n.OffsetKnown && (!ok || n.ClockOffset < lo) {
			lowest[n.DBNode] = n.ClockOffset
		}
	}
	ahead := map[string]bool{}
	for _, n := range nodes {
		if !n.OffsetKnown {
			continue
		}
		for server, lo := range lowest {
			if server != n.DBNode && n.ClockOffset-lo > max {
				ahead[n.ID] = true
				break
			}
		}
	}
	return ahead
}

// fence records whether this node's database server's clock is ahead and,
// when it is, gives up every lease it holds (locally, then in the
// database, so the others take them at their next tick) and reports true:
// the caller then takes nothing.
func (m *Membership) fence(ctx context.Context, ahead bool) bool {
	m.mu.Lock()
	was := m.fenced
	m.fenced = ahead
	if !ahead {
		m.mu.Unlock()
		if was {
			m.log.Info("cluster: the database servers' clocks agree again; taking a share of the partitions", "node", m.cfg.NodeID)
		}
		return false
	}
	lost := m.ownedLocked()
	parts := slices.Sorted(maps.Keys(m.leases))
	m.leases = map[int]hourglass.Lease{}
	clear(m.waiting)
	m.mu.Unlock()
	if !was {
		s := m.ClockSkew()
		m.log.Error("cluster: this node's database server's clock is ahead of another's by more than the maximum skew; working no partition until the clocks agree (deadlines written through the other servers would close early here)",
			"node", m.cfg.NodeID, "db_node", s.Ahead.DBNode, "skew", s.Skew, "behind", s.Behind.DBNode, "max", m.cfg.MaxClockSkew)
	}
	if len(parts) == 0 {
		return true
	}
	m.changed(change{Lost: lost})
	cctx, cancel := m.call(ctx)
	defer cancel()
	if err := m.store.ReleaseLeases(cctx, m.cfg.NodeID, parts); err != nil {
		m.log.Warn("cluster: releasing the leases of a fenced node failed; the others take them when they expire", "node", m.cfg.NodeID, "err", err)
	}
	return true
}

// Fenced reports whether this node works no partition because its
// database server's clock is ahead of another's by more than
// Config.MaxClockSkew, as of the last cluster state read. Safe for
// concurrent use.
func (m *Membership) Fenced() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fenced
}

// liveNodes returns the nodes of st seen within ttl. self's row gets the
// offset it measured at this tick's heartbeat (its row holds the one
// before). A heartbeat written through another database server than self's
// (DBNode) is aged on the nodes' own clocks when both offsets are known:
// (now - offset(self)) - (last_seen - offset(node)).
func liveNodes(st hourglass.ClusterState, self string, offset time.Duration, known bool, ttl time.Duration) []hourglass.Node {
	server := ""
	for i, n := range st.Nodes {
		if n.ID == self {
			server = n.DBNode
			if known {
				st.Nodes[i].ClockOffset, st.Nodes[i].OffsetKnown = offset, true
			}
		}
	}
	live := make([]hourglass.Node, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		age := st.Now.Sub(n.LastSeen)
		if known && n.OffsetKnown && n.DBNode != server {
			age -= offset - n.ClockOffset
		}
		if age <= ttl {
			live = append(live, n)
		}
	}
	return live
}
