package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/jackc/pgx/v5"
)

// The cluster tables (migration 0002): cluster_nodes, one row per running
// node, and cluster_leases, one row per partition, created with the schema
// and only ever updated, so every lease change is one compare-and-set UPDATE
// of an existing row.
//
// Every time here is the database server's clock (dbNow), even when the
// store was opened with Config.Clock: a test clock is one process's, and
// leases must mean the same to every process. Each method is one statement
// (so one transaction), run again after a deadlock or serialization failure.

var _ hourglass.ClusterStore = (*Store)(nil)

const (
	// heartbeatSQL inserts or refreshes a node. started_at is the given
	// StartedAt ($3, NULL when zero) or else the database's now; a later
	// heartbeat passing the StartedAt it read back keeps it, one passing
	// zero (a new process that reuses the node id) restarts it.
	// clock_offset_us is the node's measured offset ($4, NULL until it has
	// one: migration 0006).
	heartbeatSQL = `WITH now AS (SELECT ` + dbNow + ` AS ms)
INSERT INTO cluster_nodes AS n (id, addr, started_at, last_seen, clock_offset_us)
SELECT $1, $2, COALESCE($3::bigint, now.ms), now.ms, $4::bigint FROM now
ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, last_seen = excluded.last_seen, clock_offset_us = excluded.clock_offset_us,
	started_at = CASE WHEN $3::bigint IS NULL THEN excluded.started_at ELSE n.started_at END
RETURNING n.last_seen`
	// clusterStateSQL reads the leases (kind 0, by part) and the nodes seen
	// within $1 ms (kind 1, by id) in one statement: one snapshot, one
	// reading of the clock, one round trip.
	clusterStateSQL = `WITH now AS MATERIALIZED (SELECT ` + dbNow + ` AS ms)
SELECT 0 AS kind, l.part, l.owner AS id, '' AS addr, l.epoch AS a, l.expires_at AS b, NULL::bigint AS off, now.ms FROM cluster_leases l, now
UNION ALL
SELECT 1, 0, n.id, n.addr, n.started_at, n.last_seen, n.clock_offset_us, now.ms FROM cluster_nodes n, now WHERE n.last_seen >= now.ms - $1
ORDER BY 1, 2, 3`
	// acquireLeaseSQL is the compare-and-set of a lease: partition $2 still
	// held by $3 at epoch $4, and free (unowned, expired, or stolen: $5).
	// Two concurrent acquires of one snapshot: the second waits for the
	// first's row lock, then re-evaluates the WHERE on the new row and
	// matches nothing.
	acquireLeaseSQL = `WITH now AS (SELECT ` + dbNow + ` AS ms)
UPDATE cluster_leases l SET owner = $1, epoch = l.epoch + 1, expires_at = now.ms + $6 FROM now
WHERE l.part = $2 AND l.owner = $3 AND l.epoch = $4 AND (l.owner = '' OR l.expires_at <= now.ms OR $5)
RETURNING l.part, l.owner, l.epoch, l.expires_at`
	// renewLeasesSQL extends the listed (part, epoch) leases $1 still
	// holds and that have not expired.
	renewLeasesSQL = `WITH now AS (SELECT ` + dbNow + ` AS ms)
UPDATE cluster_leases l SET expires_at = now.ms + $2 FROM now, unnest($3::int[], $4::bigint[]) AS g(part, epoch)
WHERE l.part = g.part AND l.epoch = g.epoch AND l.owner = $1 AND l.expires_at > now.ms
RETURNING l.part, l.owner, l.epoch, l.expires_at`
	// Released leases keep their epoch: the next owner bumps it.
	releaseLeasesSQL = `UPDATE cluster_leases SET owner = '', expires_at = 0 WHERE owner = $1 AND part = ANY($2::int[])`
	leaveClusterSQL  = `WITH n AS (DELETE FROM cluster_nodes WHERE id = $1)
UPDATE cluster_leases SET owner = '', expires_at = 0 WHERE owner = $1`
)

// Heartbeat implements hourglass.ClusterStore: one upsert that reads the
// database's clock once. Errors: invalid_argument (no node id),
// unavailable.
func (s *Store) Heartbeat(ctx context.Context, n hourglass.Node) (time.Time, error) {
	if n.ID == "" {
		return time.Time{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "heartbeat: the node id is empty")
	}
	var started any
	if !n.StartedAt.IsZero() {
		started = hourglass.UnixMilli(n.StartedAt)
	}
	var offset any
	if n.OffsetKnown {
		offset = n.ClockOffset.Microseconds()
	}
	var now int64
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, heartbeatSQL, n.ID, n.Addr, started, offset).Scan(&now)
	})
	if err != nil {
		return time.Time{}, s.fail("heartbeat", err)
	}
	return hourglass.FromUnixMilli(now), nil
}

// ClusterState implements hourglass.ClusterStore: one statement, so the
// leases, the nodes and Now are one snapshot. Errors: unavailable.
func (s *Store) ClusterState(ctx context.Context, ttl time.Duration) (hourglass.ClusterState, error) {
	var out hourglass.ClusterState
	err := s.retry(ctx, func() error {
		out = hourglass.ClusterState{Leases: make([]hourglass.Lease, 0, hourglass.Partitions)}
		rows, err := s.pool.Query(ctx, clusterStateSQL, ttl.Milliseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				kind, part int
				id, addr   string
				a, b, now  int64
				off        *int64
			)
			if err := rows.Scan(&kind, &part, &id, &addr, &a, &b, &off, &now); err != nil {
				return err
			}
			out.Now = hourglass.FromUnixMilli(now)
			if kind == 0 {
				out.Leases = append(out.Leases, lease(part, id, a, b))
			} else {
				n := hourglass.Node{ID: id, Addr: addr, StartedAt: hourglass.FromUnixMilli(a), LastSeen: hourglass.FromUnixMilli(b)}
				if off != nil {
					n.ClockOffset, n.OffsetKnown = time.Duration(*off)*time.Microsecond, true
				}
				out.Nodes = append(out.Nodes, n)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return hourglass.ClusterState{}, s.fail("cluster state", err)
	}
	if len(out.Leases) != hourglass.Partitions {
		return hourglass.ClusterState{}, fmt.Errorf("postgres: cluster state: %d leases stored, want %d (a schema of another partition count?)", len(out.Leases), hourglass.Partitions)
	}
	return out, nil
}

// lease returns a stored lease; a free lease (expires_at 0) has the zero
// Expires.
func lease(part int, owner string, epoch, expiresMs int64) hourglass.Lease {
	l := hourglass.Lease{Part: part, Owner: owner, Epoch: epoch}
	if expiresMs != 0 {
		l.Expires = hourglass.FromUnixMilli(expiresMs)
	}
	return l
}

// AcquireLease implements hourglass.ClusterStore: one compare-and-set
// UPDATE. Errors: invalid_argument (no owner, a TTL under a millisecond),
// unavailable.
func (s *Store) AcquireLease(ctx context.Context, owner string, prev hourglass.Lease, steal bool, ttl time.Duration) (hourglass.Lease, bool, error) {
	if err := checkLeaseArgs("acquire lease", owner, ttl); err != nil {
		return hourglass.Lease{}, false, err
	}
	var (
		got hourglass.Lease
		ok  bool
	)
	err := s.retry(ctx, func() error {
		var (
			part         int
			who          string
			epoch, until int64
		)
		err := s.pool.QueryRow(ctx, acquireLeaseSQL, owner, prev.Part, prev.Owner, prev.Epoch, steal, ttl.Milliseconds()).
			Scan(&part, &who, &epoch, &until)
		if errors.Is(err, pgx.ErrNoRows) {
			ok = false
			return nil
		}
		got, ok = lease(part, who, epoch, until), err == nil
		return err
	})
	if err != nil {
		return hourglass.Lease{}, false, s.fail("acquire lease", err)
	}
	return got, ok, nil
}

// RenewLeases implements hourglass.ClusterStore: one UPDATE of every lease
// listed; the result is by partition. Errors: invalid_argument (no owner, a
// TTL under a millisecond), unavailable.
func (s *Store) RenewLeases(ctx context.Context, owner string, leases []hourglass.Lease, ttl time.Duration) ([]hourglass.Lease, error) {
	if err := checkLeaseArgs("renew leases", owner, ttl); err != nil {
		return nil, err
	}
	if len(leases) == 0 {
		return nil, nil
	}
	parts, epochs := make([]int32, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		parts[i], epochs[i] = int32(l.Part), l.Epoch
	}
	var out []hourglass.Lease
	err := s.retry(ctx, func() error {
		out = nil
		rows, err := s.pool.Query(ctx, renewLeasesSQL, owner, ttl.Milliseconds(), parts, epochs)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.Lease, error) {
			var (
				part         int
				who          string
				epoch, until int64
			)
			err := row.Scan(&part, &who, &epoch, &until)
			return lease(part, who, epoch, until), err
		})
		return err
	})
	if err != nil {
		return nil, s.fail("renew leases", err)
	}
	slices.SortFunc(out, func(a, b hourglass.Lease) int { return a.Part - b.Part })
	return out, nil
}

func checkLeaseArgs(op, owner string, ttl time.Duration) error {
	if owner == "" {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: the owner is empty", op)
	}
	if ttl < time.Millisecond {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: the TTL must be at least 1ms, got %s", op, ttl)
	}
	return nil
}

// ReleaseLeases implements hourglass.ClusterStore: the listed partitions
// that owner holds become free at once, their epochs kept. Partitions it
// does not hold are left alone. Errors: unavailable.
func (s *Store) ReleaseLeases(ctx context.Context, owner string, parts []int) error {
	if owner == "" || len(parts) == 0 {
		return nil
	}
	ps := make([]int32, len(parts))
	for i, p := range parts {
		ps[i] = int32(p)
	}
	err := s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, releaseLeasesSQL, owner, ps)
		return err
	})
	return s.fail("release leases", err)
}

// LeaveCluster implements hourglass.ClusterStore: the node's row goes and
// its leases become free in one statement. Errors: unavailable.
func (s *Store) LeaveCluster(ctx context.Context, nodeID string) error {
	if nodeID == "" {
		return nil
	}
	err := s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, leaveClusterSQL, nodeID)
		return err
	})
	return s.fail("leave cluster", err)
}

// Created orders reach other processes by NOTIFY, sent by the group-commit
// writer in the transaction of each batch that created orders (so only
// committed orders are announced, at their commit; see eventsSQL) on the
// store's created-orders channel (Store.createdChannel). A payload is
//
//	<origin>|<id>:<deadline ms>,<id>:<deadline ms>,…
//
// in decimal, where origin names the store value that wrote it; a batch
// whose list is longer than createdPayloadMax bytes is sent as several
// notifications. The listener (listenOnce) hands them to every watch of the
// store value but the one that wrote them.

// createdPayloadMax bounds a notification's payload: PostgreSQL refuses
// 8000 bytes or more.
const createdPayloadMax = 7900

// createdPayloads returns the payloads announcing orders (ids and deadlines
// in unix ms) created by origin, each at most createdPayloadMax bytes.
func createdPayloads(origin string, ids, deadlines []int64) []string {
	var (
		out []string
		b   []byte
	)
	for i, id := range ids {
		start := len(b)
		if len(b) == 0 {
			b = append(append(b, origin...), '|')
		} else {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, deadlines[i], 10)
		if len(b) > createdPayloadMax && start > len(origin)+1 {
			// Too long with this entry: send the rest without it and
			// start the next payload with it.
			entry := b[start+1:]
			out = append(out, string(b[:start]))
			b = append(append(append([]byte(nil), origin...), '|'), entry...)
		}
	}
	if len(b) > 0 {
		out = append(out, string(b))
	}
	return out
}

// parseCreated returns the origin and timers of a payload of createdPayloads.
func parseCreated(payload string) (string, []hourglass.DueItem, error) {
	origin, list, ok := strings.Cut(payload, "|")
	if !ok {
		return "", nil, errors.New("no origin")
	}
	out := make([]hourglass.DueItem, 0, strings.Count(list, ",")+1)
	for entry := range strings.SplitSeq(list, ",") {
		idText, deadlineText, ok := strings.Cut(entry, ":")
		if !ok {
			return origin, nil, fmt.Errorf("entry %q is not id:deadline", entry)
		}
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil {
			return origin, nil, fmt.Errorf("entry %q: %w", entry, err)
		}
		deadline, err := strconv.ParseInt(deadlineText, 10, 64)
		if err != nil {
			return origin, nil, fmt.Errorf("entry %q: %w", entry, err)
		}
		out = append(out, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(deadline)})
	}
	return origin, out, nil
}

// watchBufferMax bounds the timers waiting for one watch's fn: past it
// (fn slower than the creates of the other processes), they are dropped
// and fn is told to reload instead.
const watchBufferMax = 100_000

// createdWatch is one WatchCreated call's queue between the listener and
// its fn.
type createdWatch struct {
	mu     sync.Mutex
	timers []hourglass.DueItem
	reload bool
	wake   chan struct{} // a token when timers or reload are pending
}

func (w *createdWatch) push(ts []hourglass.DueItem, reload bool) {
	w.mu.Lock()
	switch {
	case reload || len(w.timers)+len(ts) > watchBufferMax:
		// The reload covers what is pending: it reads the database after
		// these orders committed.
		w.reload, w.timers = true, nil
	default:
		w.timers = append(w.timers, ts...)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *createdWatch) take() (reload bool, ts []hourglass.DueItem) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reload, ts = w.reload, w.timers
	w.reload, w.timers = false, nil
	return reload, ts
}

// watchers is the set of a store value's running watches. Its zero value
// is ready to use; safe for concurrent use.
type watchers struct {
	mu  sync.Mutex
	set map[*createdWatch]struct{}
}

func (ws *watchers) add(w *createdWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.set == nil {
		ws.set = make(map[*createdWatch]struct{})
	}
	ws.set[w] = struct{}{}
}

func (ws *watchers) remove(w *createdWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.set, w)
}

// push hands timers, or a reload, to every watch; it never blocks on one.
func (ws *watchers) push(ts []hourglass.DueItem, reload bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.set {
		w.push(ts, reload)
	}
}

func (ws *watchers) empty() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.set) == 0
}

// onCreated handles a notification on the created channel.
func (s *Store) onCreated(payload string) {
	if s.watches.empty() {
		return
	}
	origin, ts, err := parseCreated(payload)
	if origin == s.origin {
		return // this store value's own creates
	}
	if err != nil {
		s.log.Warn("postgres: an unreadable created-orders notification; the watches reload", "err", err)
		s.watches.push(nil, true)
		return
	}
	s.watches.push(ts, false)
}

// WatchCreated implements hourglass.ClusterStore. It calls fn(nil) first
// (orders created before the watch began are not reported: load them
// after this call), then with the timers of the orders that other store
// values, in this process or others, commit on the same database and
// schema, soon after each commit; and fn(nil) again after the listening
// connection reconnects, or after more than watchBufferMax timers piled up
// behind a slow fn. fn is called from the caller's goroutine, never
// concurrently; several watches may run on one store value, each is told
// everything. It returns nil when ctx ends, or an unavailable error when
// the store is closed.
func (s *Store) WatchCreated(ctx context.Context, fn func([]hourglass.DueItem)) error {
	w := &createdWatch{wake: make(chan struct{}, 1)}
	s.watches.add(w)
	defer s.watches.remove(w)
	// Registered before the first fn(nil): whatever commits after the
	// reload begins is either in it or reported.
	w.push(nil, true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closed:
			return errClosed
		case <-w.wake:
		}
		reload, ts := w.take()
		if reload {
			fn(nil)
		}
		if len(ts) > 0 {
			fn(ts)
		}
	}
}

var _ hourglass.DueFeed = (*Store)(nil)

// WatchDue implements hourglass.DueFeed: the due items this store value's
// writes commit, and those of the other processes (WatchCreated).
func (s *Store) WatchDue(ctx context.Context, fn func(hourglass.DueUpdate)) (wait func()) {
	return s.w.WatchDue(ctx, s.WatchCreated, fn)
}
