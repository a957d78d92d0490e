package node

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/metrics"
)

// member is this process's part in the cluster: the membership (nil for a
// store one process owns, SQLite), and what the engine, webhook delivery,
// alerts and the API take from it.
type member struct {
	m     *cluster.Membership
	view  api.ClusterSource
	clock hourglass.Clock // corrected by the database's clock when shared
	// maxSkew is Cluster.MaxDBClockSkew (--max-db-clock-skew).
	maxSkew time.Duration
}

// join registers this process as a node of the database's cluster (a first
// heartbeat, which measures the clock offset), or, on a store that cannot
// be shared, makes it the only node.
func join(ctx context.Context, db hourglass.Database, addr string, f Cluster, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*member, error) {
	if f.MaxDBClockSkew <= 0 || f.MaxDBClockSkew > time.Minute {
		return nil, fmt.Errorf("--max-db-clock-skew must be above 0 and at most 1m, got %s", f.MaxDBClockSkew)
	}
	cs, ok := db.(hourglass.ClusterStore)
	if !ok {
		m.Owned(hourglass.Partitions)
		m.Nodes(1)
		return &member{view: cluster.Single{ID: cmp.Or(f.NodeID, cluster.DefaultNodeID()), Addr: addr, StartedAt: clock.Now(), Clock: clock}, clock: clock}, nil
	}
	mem, err := cluster.New(cs, cluster.Config{NodeID: f.NodeID, Addr: addr, LeaseTTL: f.LeaseTTL, MaxClockSkew: f.MaxDBClockSkew, Clock: clock, Logger: log, Observer: m})
	if err != nil {
		return nil, fmt.Errorf("--node-id/--lease-ttl: %w", err)
	}
	joinCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := mem.Join(joinCtx); err != nil {
		return nil, err
	}
	if off := mem.Offset(); off.Abs() > 500*time.Millisecond {
		log.Warn("hourglass: this machine's clock is off the database's; deadlines are timed by the database's clock", "offset", off)
	}
	log.Info("hourglass: joined the cluster", "node", mem.NodeID(), "lease_ttl", f.LeaseTTL)
	return &member{m: mem, view: mem, clock: mem.Clock(), maxSkew: f.MaxDBClockSkew}, nil
}

// skewSource returns the clock skew between the database servers, for the
// db_clock_skew alert; nil for a store one process owns.
func (n *member) skewSource() alert.ClockSkewSource {
	if n.m == nil {
		return nil
	}
	return n
}

// DBClockSkew implements alert.ClockSkewSource.
func (n *member) DBClockSkew() time.Duration { return n.m.ClockSkew().Skew }

// skewError returns why /readyz answers 503 while this node's database
// server's clock is ahead of another's by more than --max-db-clock-skew
// (the membership has fenced it: it works no partition, and its pays would
// be refused early), or nil. It names the servers and the skew. The nodes'
// own clocks are assumed synchronised (NTP): their error adds to the
// measured skew.
func (n *member) skewError() error {
	if n.m == nil || !n.m.Fenced() {
		return nil
	}
	s := n.m.ClockSkew()
	return fmt.Errorf("database clock skew: this node's database server's clock is ahead of another's by more than --max-db-clock-skew %s (the largest skew: %s, server %s seen by node %s ahead of server %s seen by node %s); "+
		"deadlines written through one server would close early by the other's clock, so this node works no partition until the servers' clocks are synchronised",
		n.maxSkew, s.Skew.Round(time.Millisecond), s.Ahead.DBNode, s.Ahead.ID, s.Behind.DBNode, s.Behind.ID)
}

// ready adds the database clock skew check to a scheduler's Healthy, which
// /readyz consults.
func (n *member) ready(s api.Engine) api.Engine {
	if n.m == nil {
		return s
	}
	return skewGate{s, n.skewError}
}

// skewGate is an api.Engine whose Healthy also fails on database clock
// skew.
type skewGate struct {
	api.Engine
	skew func() error
}

// Healthy implements api.Engine: the scheduler's own error first.
func (g skewGate) Healthy() error {
	if err := g.Engine.Healthy(); err != nil {
		return err
	}
	return g.skew()
}

// ownership returns the membership as the engine's and webhook delivery's
// partition set, nil when this node owns everything.
func (n *member) ownership() cluster.Ownership {
	if n.m == nil {
		return nil
	}
	return n.m
}

// leader reports whether this node does the cluster's once-only chores.
func (n *member) leader() bool { return n.m == nil || n.m.Leader() }

// nodeID is this node's id, as the cluster knows it (recorded with each
// close: hourglass.Closer).
func (n *member) nodeID() string {
	if n.m != nil {
		return n.m.NodeID()
	}
	if s, ok := n.view.(cluster.Single); ok {
		return s.ID
	}
	return ""
}

// run takes part in the cluster until ctx ends (then it releases its
// partitions); wait blocks until it has.
func (n *member) run(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	if n.m == nil {
		close(done)
		return func() {}
	}
	go func() {
		defer close(done)
		_ = n.m.Run(ctx)
	}()
	return func() { <-done }
}
