package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/metrics"
)

// clusterFlags configure this process's part in a cluster of processes
// sharing one PostgreSQL or MySQL database.
type clusterFlags struct {
	NodeID   string        `help:"This node's name in the cluster (default: the host name and a random suffix)." env:"HOURGLASS_NODE_ID"`
	LeaseTTL time.Duration `help:"How long a node's partition leases last without renewal: a node that stops renewing loses its partitions to the others after this." default:"5s" env:"HOURGLASS_LEASE_TTL"`
}

// node is this process's part in the cluster: the membership (nil for a
// store one process owns, SQLite), and what the engine, webhook delivery,
// alerts and the API take from it.
type node struct {
	m     *cluster.Membership
	view  api.ClusterSource
	clock hourglass.Clock // corrected by the database's clock when shared
}

// join registers this process as a node of the database's cluster (a first
// heartbeat, which measures the clock offset), or, on a store that cannot
// be shared, makes it the only node.
func (f clusterFlags) join(ctx context.Context, db hourglass.Database, addr string, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*node, error) {
	cs, ok := db.(hourglass.ClusterStore)
	if !ok {
		m.Owned(hourglass.Partitions)
		m.Nodes(1)
		return &node{view: cluster.Single{ID: cmp.Or(f.NodeID, cluster.DefaultNodeID()), Addr: addr, StartedAt: clock.Now(), Clock: clock}, clock: clock}, nil
	}
	mem, err := cluster.New(cs, cluster.Config{NodeID: f.NodeID, Addr: addr, LeaseTTL: f.LeaseTTL, Clock: clock, Logger: log, Observer: m})
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
	return &node{m: mem, view: mem, clock: mem.Clock()}, nil
}

// ownership returns the membership as the engine's and webhook delivery's
// partition set, nil when this node owns everything.
func (n *node) ownership() cluster.Ownership {
	if n.m == nil {
		return nil
	}
	return n.m
}

// leader reports whether this node does the cluster's once-only chores.
func (n *node) leader() bool { return n.m == nil || n.m.Leader() }

// run takes part in the cluster until ctx ends (then it releases its
// partitions); wait blocks until it has.
func (n *node) run(ctx context.Context) (wait func()) {
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
