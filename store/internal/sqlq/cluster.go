package sqlq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// The cluster's tables (hourglass.ClusterStore): cluster_nodes, one row per
// running node, and cluster_leases, one row per partition, created with the
// schema and only ever updated, so every lease change is one
// compare-and-set UPDATE of an existing row.
//
// Every time here is the database server's clock (Dialect.Now bound to
// NULL) even when the store was opened with a test clock: a test clock is
// one process's, and leases must mean the same to every process. A call
// that writes the time it returns (Heartbeat, RenewLeases) reads now first,
// in a statement of its own, and binds it. Each call runs again after a
// lost race (a deadlock, a serialization failure, a lost Galera
// certification) as the store's retry policy allows, within the caller's
// ctx: the cluster gives every membership call a deadline.

// Cluster is the SQL of the cluster's tables, which only the stores on a
// database server have (SQLite's store is one process): those stores embed
// it beside *Store.
type Cluster struct{ s *Store }

// Cluster returns the SQL of the cluster's tables.
func (s *Store) Cluster() Cluster { return Cluster{s} }

// Autocommitter is an optional ability of a DB: Autocommit runs fn on the
// pool outside a transaction, each statement committing alone, again after
// a lost race as Write would, its errors mapped as Write's. The cluster's
// calls whose statements need not commit together run in it, one round
// trip a statement with no BEGIN and COMMIT around them; without it they
// run in Write.
type Autocommitter interface {
	Autocommit(ctx context.Context, op string, fn func(q Querier) error) error
}

// autocommit runs fn in the DB's Autocommit, or else in Write.
func (s *Store) autocommit(ctx context.Context, op string, fn func(x q) error) error {
	if a, ok := s.db.(Autocommitter); ok {
		return a.Autocommit(ctx, op, func(x Querier) error { return fn(s.wrap(x)) })
	}
	return s.write(ctx, op, Normal, fn)
}

// dbNow reads the database server's now, in unix ms, in its own
// statement, whatever clock the store was opened with.
func (c Cluster) dbNow(ctx context.Context, x q) (int64, error) { return c.s.nowOf(ctx, x, nil) }

// Heartbeat implements hourglass.ClusterStore: the database's now is read
// first and written as last_seen (and as started_at when n.StartedAt is
// zero: a process's first heartbeat, even under an id a previous process
// used; otherwise the stored started_at is kept), so the time returned is
// the one stored. The node's measured clock offset (NULL until it has one)
// and, with Dialect.DBNode, the server the statement reached are written
// with it. Errors: invalid_argument (no node id), unavailable.
func (c Cluster) Heartbeat(ctx context.Context, n hourglass.Node) (time.Time, error) {
	if n.ID == "" {
		return time.Time{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "heartbeat: the node id is empty")
	}
	var offset any // NULL: not measured yet
	if n.OffsetKnown {
		offset = n.ClockOffset.Microseconds()
	}
	d := c.s.d
	cols, values := "id, addr, started_at, last_seen, clock_offset_us", "?, ?, ?, ?, ?"
	set := []string{"addr", "last_seen", "clock_offset_us"}
	if d.DBNode != "" {
		cols, values, set = cols+", db_node", values+", "+d.DBNode, append(set, "db_node")
	}
	if n.StartedAt.IsZero() {
		set = append(set, "started_at")
	}
	upsert := `INSERT INTO cluster_nodes (` + cols + `) VALUES (` + values + `)` + d.Upsert("cluster_nodes", "id", set, nil)
	var now int64
	err := c.s.autocommit(ctx, "heartbeat", func(x q) error {
		var err error
		if now, err = c.dbNow(ctx, x); err != nil {
			return err
		}
		started := now
		if !n.StartedAt.IsZero() {
			started = hourglass.UnixMilli(n.StartedAt)
		}
		_, err = x.exec(ctx, upsert, n.ID, n.Addr, started, now, offset)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	c.s.siblings.Heartbeat(n.ID)
	return hourglass.FromUnixMilli(now), nil
}

// ClusterState implements hourglass.ClusterStore with one statement, so
// the leases, the nodes and Now are one snapshot with one reading of the
// clock. It fails if cluster_leases does not hold a row for each of the
// hourglass.Partitions. Errors: unavailable.
func (c Cluster) ClusterState(ctx context.Context, ttl time.Duration) (hourglass.ClusterState, error) {
	dbNode := `''`
	if c.s.d.DBNode != "" {
		dbNode = `n.db_node`
	}
	query := `WITH now AS (SELECT ` + c.s.d.Now + ` AS ms)
SELECT 0, l.part, l.owner, l.epoch, l.expires_at, '', NULL, '', now.ms FROM cluster_leases l, now
UNION ALL
SELECT 1, 0, n.id, n.started_at, n.last_seen, n.addr, n.clock_offset_us, ` + dbNode + `, now.ms FROM cluster_nodes n, now WHERE n.last_seen >= now.ms - ?`
	var st hourglass.ClusterState
	err := c.s.read(ctx, "cluster state", func(x q) error {
		st = hourglass.ClusterState{Leases: make([]hourglass.Lease, 0, hourglass.Partitions)}
		var (
			kind, part    int
			id, addr, dbn string
			a, b, now     int64
			off           *int64
		)
		err := x.each(ctx, query, []any{nil, ttl.Milliseconds()}, []any{&kind, &part, &id, &a, &b, &addr, &off, &dbn, &now}, func() error {
			st.Now = hourglass.FromUnixMilli(now)
			if kind == 0 {
				st.Leases = append(st.Leases, lease(part, id, a, b))
				return nil
			}
			n := hourglass.Node{ID: id, Addr: addr, StartedAt: hourglass.FromUnixMilli(a), LastSeen: hourglass.FromUnixMilli(b), DBNode: dbn}
			if off != nil {
				n.ClockOffset, n.OffsetKnown = time.Duration(*off)*time.Microsecond, true
			}
			st.Nodes = append(st.Nodes, n)
			return nil
		})
		if err == nil && len(st.Leases) != hourglass.Partitions {
			err = fmt.Errorf("cluster_leases has %d rows, want %d (one per partition)", len(st.Leases), hourglass.Partitions)
		}
		return err
	})
	if err != nil {
		return hourglass.ClusterState{}, err
	}
	slices.SortFunc(st.Leases, func(x, y hourglass.Lease) int { return cmp.Compare(x.Part, y.Part) })
	slices.SortFunc(st.Nodes, func(x, y hourglass.Node) int { return strings.Compare(x.ID, y.ID) })
	c.s.siblings.Observe(st, ttl, hourglass.SystemClock{}.Now())
	return st, nil
}

// Shared reports whether the last cluster read through s (ClusterState,
// by the node that heartbeats through it) listed another live node: the
// group commit gathers only then (writer.Config.Shared). Real time, like
// the cluster's validity, whatever clock the store was given.
func (s *Store) Shared() bool { return s.siblings.Shared(hourglass.SystemClock{}.Now()) }

// lease returns a stored lease; a free lease (expires_at 0) has the zero
// Expires.
func lease(part int, owner string, epoch, expiresMs int64) hourglass.Lease {
	l := hourglass.Lease{Part: part, Owner: owner, Epoch: epoch}
	if expiresMs != 0 {
		l.Expires = hourglass.FromUnixMilli(expiresMs)
	}
	return l
}

// checkLease returns the invalid_argument error of op for an empty owner or
// a TTL under a millisecond.
func checkLease(op, owner string, ttl time.Duration) error {
	if owner == "" {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: the owner is empty", op)
	}
	if ttl < time.Millisecond {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: the TTL must be at least 1ms, got %s", op, ttl)
	}
	return nil
}

// AcquireLease implements hourglass.ClusterStore: one compare-and-set
// UPDATE of partition prev.Part still held by prev.Owner at prev.Epoch, and
// free (unowned, expired, or stolen), whose row comes back by RETURNING or
// is read back in the same transaction under the lock the UPDATE took (rows
// matched: 1 won, 0 lost). Two concurrent acquires of one snapshot: the
// second waits for the first's row lock, then matches nothing. Errors:
// invalid_argument (no owner, a TTL under a millisecond), unavailable.
func (c Cluster) AcquireLease(ctx context.Context, owner string, prev hourglass.Lease, steal bool, ttl time.Duration) (hourglass.Lease, bool, error) {
	if err := checkLease("acquire lease", owner, ttl); err != nil {
		return hourglass.Lease{}, false, err
	}
	now := c.s.d.Now
	update := `UPDATE cluster_leases SET owner = ?, epoch = epoch + 1, expires_at = ` + now + ` + ?
WHERE part = ? AND owner = ? AND epoch = ? AND (owner = '' OR expires_at <= ` + now + ` OR ?)`
	args := []any{owner, nil, ttl.Milliseconds(), prev.Part, prev.Owner, prev.Epoch, nil, steal}
	const cols = `part, owner, epoch, expires_at`
	var (
		part         int
		who          string
		epoch, until int64
		won          bool
	)
	err := c.s.autocommit(ctx, "acquire lease", func(x q) error {
		var err error
		if c.s.d.Returning {
			won, err = x.row(ctx, update+` RETURNING `+cols, args, &part, &who, &epoch, &until)
			return err
		}
		won = false
		if n, err := x.exec(ctx, update, args...); err != nil || n != 1 {
			return err
		}
		won, err = x.row(ctx, `SELECT `+cols+` FROM cluster_leases WHERE part = ?`, []any{prev.Part}, &part, &who, &epoch, &until)
		return err
	})
	if err != nil || !won {
		return hourglass.Lease{}, false, err
	}
	return lease(part, who, epoch, until), true, nil
}

// RenewLeases implements hourglass.ClusterStore: now is read first, the
// listed (part, epoch) leases owner still holds and that have not expired
// by it are extended to now + ttl by one UPDATE, and those rows come back
// by RETURNING or are read back (still locked by it). The result is by
// partition. Errors as AcquireLease's.
func (c Cluster) RenewLeases(ctx context.Context, owner string, leases []hourglass.Lease, ttl time.Duration) ([]hourglass.Lease, error) {
	if err := checkLease("renew leases", owner, ttl); err != nil {
		return nil, err
	}
	if len(leases) == 0 {
		return nil, nil
	}
	pairs := make([]any, 0, 2*len(leases))
	for _, l := range leases {
		pairs = append(pairs, l.Part, l.Epoch)
	}
	in := `(part, epoch) IN (` + Placeholders(len(leases), 2) + `)`
	var renewed []hourglass.Lease
	err := c.s.autocommit(ctx, "renew leases", func(x q) error {
		renewed = renewed[:0]
		now, err := c.dbNow(ctx, x)
		if err != nil {
			return err
		}
		expires := now + ttl.Milliseconds()
		l := hourglass.Lease{Owner: owner, Expires: hourglass.FromUnixMilli(expires)}
		dest, add := []any{&l.Part, &l.Epoch}, func() error { renewed = append(renewed, l); return nil }
		update := `UPDATE cluster_leases SET expires_at = ? WHERE owner = ? AND expires_at > ? AND ` + in
		args := append([]any{expires, owner, now}, pairs...)
		if c.s.d.Returning {
			return x.each(ctx, update+` RETURNING part, epoch`, args, dest, add)
		}
		if n, err := x.exec(ctx, update, args...); err != nil || n == 0 {
			return err
		}
		// expires > now, so a row of the list with this expiry was renewed
		// by the UPDATE above (which still holds its lock).
		return x.each(ctx, `SELECT part, epoch FROM cluster_leases WHERE owner = ? AND expires_at = ? AND `+in,
			append([]any{owner, expires}, pairs...), dest, add)
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(renewed, func(x, y hourglass.Lease) int { return cmp.Compare(x.Part, y.Part) })
	return renewed, nil
}

// ReleaseLeases implements hourglass.ClusterStore: the listed partitions
// that owner holds become free at once (no owner, expired), their epochs
// kept: the next owner bumps it. Partitions it does not hold are left
// alone. Errors: unavailable.
func (c Cluster) ReleaseLeases(ctx context.Context, owner string, parts []int) error {
	if owner == "" || len(parts) == 0 {
		return nil
	}
	ps := make([]int64, len(parts))
	for i, p := range parts {
		ps[i] = int64(p)
	}
	listed, args := in(c.s.d, "part", ps)
	return c.s.autocommit(ctx, "release leases", func(x q) error {
		_, err := x.exec(ctx, `UPDATE cluster_leases SET owner = '', expires_at = 0 WHERE owner = ? AND `+listed, append([]any{owner}, args...)...)
		return err
	})
}

// LeaveCluster implements hourglass.ClusterStore: the node's row is
// deleted and its leases released in one transaction. Errors: unavailable.
func (c Cluster) LeaveCluster(ctx context.Context, nodeID string) error {
	if nodeID == "" {
		return nil
	}
	return c.s.write(ctx, "leave cluster", Normal, func(x q) error {
		if _, err := x.exec(ctx, `DELETE FROM cluster_nodes WHERE id = ?`, nodeID); err != nil {
			return err
		}
		_, err := x.exec(ctx, `UPDATE cluster_leases SET owner = '', expires_at = 0 WHERE owner = ?`, nodeID)
		return err
	})
}
