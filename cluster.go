package hourglass

import (
	"context"
	"time"
)

// Partitions is how many partitions the work that must happen once is
// divided into among the nodes sharing a database: an order, its timer,
// its outbox row and its webhook deliveries belong to partition
// PartitionOf(order id). It is part of the schema (a node of a binary
// with another count would disagree on ownership), and it bounds the
// nodes that can share the work: a node beyond the 64th owns nothing.
const Partitions = 64

// PartitionOf returns the partition of an order id.
func PartitionOf(orderID int64) int {
	p := orderID % Partitions
	if p < 0 {
		p += Partitions
	}
	return int(p)
}

// Parts is a set of partitions, as a filter of the store's scans. The nil
// Parts means every partition (one node, or a store that is not shared);
// an empty non-nil Parts means none.
type Parts []int

// Has reports whether the set holds the partition of an order id.
func (ps Parts) Has(orderID int64) bool {
	if ps == nil {
		return true
	}
	p := PartitionOf(orderID)
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// Lease is one partition's lease as stored: owned by Owner (a node id,
// "" when nobody owns it) until Expires, by the database's clock. Epoch
// grows by one each time the partition changes owner, so a node that lost
// a partition (its lease expired while it was paused, or another node took
// it over) cannot renew it by mistake.
type Lease struct {
	Part    int
	Owner   string
	Epoch   int64
	Expires time.Time
}

// Node is a process of the cluster as stored: it renews LastSeen (the
// database's clock) while it runs.
type Node struct {
	ID        string
	Addr      string // the address its API listens on, as it was told
	StartedAt time.Time
	LastSeen  time.Time
	// ClockOffset is the offset of the node's database server's clock from
	// the node's own (positive: the database's is ahead), as the node
	// measured it and its heartbeat published it; OffsetKnown is false
	// until it has (its first heartbeat, or a node of an older version).
	ClockOffset time.Duration
	OffsetKnown bool
	// DBNode names the database server the node's heartbeat reached
	// ("host:port" on MySQL, which may be one Galera node of several), ""
	// where the database is one server (PostgreSQL). Offsets measured
	// through different servers compare their clocks (cluster.ClockSkewOf).
	DBNode string
}

// ClusterState is a snapshot of the cluster table: the database's now,
// every partition's lease (Partitions of them, by Part) and the nodes seen
// within the TTL asked for, by id.
type ClusterState struct {
	Now    time.Time
	Leases []Lease
	Nodes  []Node
}

// ClusterStore is implemented by stores that several processes may share
// (PostgreSQL, MySQL): membership and partition leases, kept in the
// database and timed by the database's clock, which is the cluster's only
// coordinator. Every method is one short transaction; all are safe for
// concurrent use and idempotent. Errors: CodeUnavailable when the
// database cannot be reached.
type ClusterStore interface {
	// Heartbeat inserts or refreshes the node's row (LastSeen = the
	// database's now; StartedAt and Addr as given on its first heartbeat)
	// and returns the database's now, read in the same statement.
	Heartbeat(ctx context.Context, n Node) (dbNow time.Time, err error)
	// ClusterState returns every partition's lease and the nodes whose
	// LastSeen is within ttl of the database's now.
	ClusterState(ctx context.Context, ttl time.Duration) (ClusterState, error)
	// AcquireLease makes owner the holder of prev.Part for ttl, bumping
	// the epoch, if the lease is still exactly prev (same owner and epoch:
	// a compare-and-set) and prev is free: unowned, expired by the
	// database's clock, or held by a node that is being relieved of it
	// (steal is true: a rebalance). It returns the new lease, or false when
	// the lease changed since prev was read.
	AcquireLease(ctx context.Context, owner string, prev Lease, steal bool, ttl time.Duration) (Lease, bool, error)
	// RenewLeases extends, to the database's now + ttl, each of the given
	// leases that owner still holds with the same epoch and that has not
	// expired, and returns those it renewed (a lease missing from the
	// result is lost: stop its work).
	RenewLeases(ctx context.Context, owner string, leases []Lease, ttl time.Duration) ([]Lease, error)
	// ReleaseLeases gives up the listed partitions that owner holds (they
	// become free at once, for the other nodes to take).
	ReleaseLeases(ctx context.Context, owner string, parts []int) error
	// LeaveCluster removes the node's row (a clean shutdown) and releases
	// every lease it holds.
	LeaveCluster(ctx context.Context, nodeID string) error
	// PruneNodes deletes up to limit rows of nodes not seen for longer
	// than gone by the database's clock (crashed, never left), and returns
	// how many it deleted. A pruned node that comes back heartbeats its row
	// in again.
	PruneNodes(ctx context.Context, gone time.Duration, limit int) (int, error)
	// WatchCreated calls fn with the timers of pending orders that other
	// store values (other processes) committed, soon after each commit,
	// until ctx ends (then it returns nil). It is at most once: after it
	// may have missed some (a lost connection), it calls fn(nil), meaning
	// "reload". fn is called from one goroutine and must not block long.
	WatchCreated(ctx context.Context, fn func([]DueItem)) error
}

// Mask returns the set as a 64-bit mask, bit p for partition p (-1, every
// bit, for the nil Parts), so that a store filters with one parameter:
// ((mask >> (id % 64)) & 1) = 1 holds for an order id of the set in SQL's
// arithmetic shifts as well as logical ones.
func (ps Parts) Mask() int64 {
	if ps == nil {
		return -1
	}
	var m uint64
	for _, p := range ps {
		if p >= 0 && p < Partitions {
			m |= 1 << uint(p)
		}
	}
	return int64(m)
}

// ClusterView is what GET /v1/cluster shows: the partitions and the live
// nodes, each with the partitions it owns (ascending) and whether it is the
// node answering.
type ClusterView struct {
	Partitions int
	Nodes      []NodeView
}

// NodeView is one node of a ClusterView.
type NodeView struct {
	Node
	Partitions []int
	Self       bool
}
