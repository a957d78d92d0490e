package mysql

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// The cluster (hourglass.ClusterStore) in three tables (migration 0004):
// cluster_nodes and cluster_leases, read and written by short statements
// timed by the database server's clock (dbNowMs) even when the store was
// opened with a test clock, because leases must agree across processes;
// and order_feed, through which a process learns of the orders the others
// create, since MySQL has no LISTEN/NOTIFY.
//
// The feed. Each group commit that creates orders, and each arming of a
// named timer (timers.go; its id, from hourglass.TimerIDBase up, stands in
// for an order's), inserts one order_feed row as its last statement: its
// origin (this Store value's random id), the database's now, and
// "<id>:<deadline ms>,…" of its created orders or its timer.
// WatchCreated polls the rows after a cursor every WatchPollInterval.
// AUTO_INCREMENT hands a seq out at the insert, before the commit, so a
// row with a lower seq can become visible after a higher one: the cursor
// lags, moving only to the highest seq first seen at least WatchLag ago,
// and the seqs above it already reported are remembered so that none is
// reported twice. A row that takes longer than WatchLag from its insert to
// its commit (the last statement of its batch, so the commit alone) can be
// missed: the contract is at most once, and the engine's sweeper finds
// what a watch missed.

var _ hourglass.ClusterStore = (*Store)(nil)

const (
	// WatchPollInterval is how often WatchCreated reads the feed: the delay
	// between another process's commit and its report.
	WatchPollInterval = 50 * time.Millisecond
	// WatchLag is how long WatchCreated waits for a feed row with a lower
	// seq than one it has seen to commit (see the feed above).
	WatchLag = 5 * time.Second
	// FeedRetention is how long feed rows are kept. Watches delete older
	// rows, at most feedPruneLimit about every feedPruneInterval, so a
	// database no process watches keeps them until one does.
	FeedRetention = time.Minute
	// feedPruneInterval and feedPruneLimit bound the watches' deletes.
	feedPruneInterval = time.Second
	feedPruneLimit    = 1000
)

// newOrigin returns a random id for a Store value's feed rows.
func newOrigin() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Heartbeat implements hourglass.ClusterStore. The database's now is read
// first and written as last_seen (and started_at on a first heartbeat), so
// the time returned is the one stored. A zero n.StartedAt (a process's
// first heartbeat, even under an id a previous process used) sets
// started_at to now; otherwise the stored started_at is kept. The node's
// measured clock offset (NULL until it has one) and the server the
// statement reached (@@hostname:@@port: on Galera, the node whose NOW(3)
// this process's transactions read) are written with it (migration 0008).
// Errors: unavailable when the database cannot be reached.
func (s *Store) Heartbeat(ctx context.Context, n hourglass.Node) (time.Time, error) {
	if n.ID == "" {
		return time.Time{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "mysql: heartbeat: node id is empty")
	}
	var started any // NULL: started now
	if !n.StartedAt.IsZero() {
		started = hourglass.UnixMilli(n.StartedAt)
	}
	var offset any // NULL: not measured yet
	if n.OffsetKnown {
		offset = n.ClockOffset.Microseconds()
	}
	var now int64
	err := s.inTx(ctx, "heartbeat", func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT `+dbNowMs).Scan(&now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO cluster_nodes (id, addr, started_at, last_seen, clock_offset_us, db_node)
VALUES (?, ?, COALESCE(?, ?), ?, ?, CONCAT(@@hostname, ':', @@port))
ON DUPLICATE KEY UPDATE addr = VALUES(addr), last_seen = VALUES(last_seen),
	clock_offset_us = VALUES(clock_offset_us), db_node = VALUES(db_node),
	started_at = IF(? IS NULL, VALUES(started_at), started_at)`, n.ID, n.Addr, started, now, now, offset, started)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return hourglass.FromUnixMilli(now), nil
}

// ClusterState implements hourglass.ClusterStore with one statement, so
// the leases, the nodes and now are one consistent snapshot. It fails if
// cluster_leases does not hold a row for each of the hourglass.Partitions.
func (s *Store) ClusterState(ctx context.Context, ttl time.Duration) (hourglass.ClusterState, error) {
	// NOW(3) is the statement's start wherever it appears in it.
	rows, err := s.db.QueryContext(ctx, `SELECT 0, part, owner, epoch, expires_at, '', NULL, '', `+dbNowMs+` FROM cluster_leases
UNION ALL
SELECT 1, 0, id, started_at, last_seen, addr, clock_offset_us, db_node, `+dbNowMs+` FROM cluster_nodes WHERE last_seen >= `+dbNowMs+` - ?`, ttl.Milliseconds())
	if err != nil {
		return hourglass.ClusterState{}, fail("cluster state", err)
	}
	defer rows.Close()
	var (
		st  hourglass.ClusterState
		now int64
	)
	for rows.Next() {
		var (
			kind, part    int
			id, addr, dbn string
			a, b          int64
			off           sql.NullInt64
		)
		if err := rows.Scan(&kind, &part, &id, &a, &b, &addr, &off, &dbn, &now); err != nil {
			return hourglass.ClusterState{}, fail("cluster state", err)
		}
		if kind == 0 {
			st.Leases = append(st.Leases, hourglass.Lease{Part: part, Owner: id, Epoch: a, Expires: hourglass.FromUnixMilli(b)})
		} else {
			st.Nodes = append(st.Nodes, hourglass.Node{ID: id, Addr: addr, StartedAt: hourglass.FromUnixMilli(a), LastSeen: hourglass.FromUnixMilli(b),
				ClockOffset: time.Duration(off.Int64) * time.Microsecond, OffsetKnown: off.Valid, DBNode: dbn})
		}
	}
	if err := rows.Err(); err != nil {
		return hourglass.ClusterState{}, fail("cluster state", err)
	}
	if len(st.Leases) != hourglass.Partitions {
		return hourglass.ClusterState{}, fmt.Errorf("mysql: cluster state: cluster_leases has %d rows, want %d (one per partition)", len(st.Leases), hourglass.Partitions)
	}
	st.Now = hourglass.FromUnixMilli(now)
	slices.SortFunc(st.Leases, func(x, y hourglass.Lease) int { return cmp.Compare(x.Part, y.Part) })
	slices.SortFunc(st.Nodes, func(x, y hourglass.Node) int { return strings.Compare(x.ID, y.ID) })
	return st, nil
}

// AcquireLease implements hourglass.ClusterStore: one compare-and-set
// UPDATE (rows matched: 1 won, 0 lost), then the row read back in the same
// transaction, under the lock the UPDATE took. Errors: invalid_argument
// for an empty owner or a ttl under a millisecond; unavailable when the
// database cannot be reached.
func (s *Store) AcquireLease(ctx context.Context, owner string, prev hourglass.Lease, steal bool, ttl time.Duration) (hourglass.Lease, bool, error) {
	if err := checkLease(owner, ttl); err != nil {
		return hourglass.Lease{}, false, err
	}
	var (
		got hourglass.Lease
		won bool
	)
	err := s.inTx(ctx, "acquire lease", func(tx *sql.Tx) error {
		won = false
		res, err := tx.ExecContext(ctx, `UPDATE cluster_leases SET owner = ?, epoch = epoch + 1, expires_at = `+dbNowMs+` + ?
WHERE part = ? AND owner = ? AND epoch = ? AND (owner = '' OR expires_at <= `+dbNowMs+` OR ?)`,
			owner, ttl.Milliseconds(), prev.Part, prev.Owner, prev.Epoch, steal)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return err
		}
		var expires int64
		if err := tx.QueryRowContext(ctx, `SELECT part, owner, epoch, expires_at FROM cluster_leases WHERE part = ?`, prev.Part).
			Scan(&got.Part, &got.Owner, &got.Epoch, &expires); err != nil {
			return err
		}
		got.Expires = hourglass.FromUnixMilli(expires)
		won = true
		return nil
	})
	if err != nil || !won {
		return hourglass.Lease{}, false, err
	}
	return got, true, nil
}

// RenewLeases implements hourglass.ClusterStore: now is read first, the
// leases still held are extended to now + ttl by one UPDATE, and those
// rows (locked by it) are read back. Errors as AcquireLease's.
func (s *Store) RenewLeases(ctx context.Context, owner string, leases []hourglass.Lease, ttl time.Duration) ([]hourglass.Lease, error) {
	if err := checkLease(owner, ttl); err != nil {
		return nil, err
	}
	if len(leases) == 0 {
		return nil, nil
	}
	pairs := make([]any, 0, 2*len(leases))
	for _, l := range leases {
		pairs = append(pairs, l.Part, l.Epoch)
	}
	in := `(part, epoch) IN (` + rowsOf(len(leases), `(?, ?)`) + `)`
	var renewed []hourglass.Lease
	err := s.inTx(ctx, "renew leases", func(tx *sql.Tx) error {
		renewed = renewed[:0]
		var now int64
		if err := tx.QueryRowContext(ctx, `SELECT `+dbNowMs).Scan(&now); err != nil {
			return err
		}
		expires := now + ttl.Milliseconds()
		res, err := tx.ExecContext(ctx, `UPDATE cluster_leases SET expires_at = ? WHERE owner = ? AND expires_at > ? AND `+in,
			append([]any{expires, owner, now}, pairs...)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		// expires > now, so a row of the list with this expiry was renewed
		// by the UPDATE above (which still holds its lock).
		rows, err := tx.QueryContext(ctx, `SELECT part, epoch FROM cluster_leases WHERE owner = ? AND expires_at = ? AND `+in+` ORDER BY part`,
			append([]any{owner, expires}, pairs...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			l := hourglass.Lease{Owner: owner, Expires: hourglass.FromUnixMilli(expires)}
			if err := rows.Scan(&l.Part, &l.Epoch); err != nil {
				return err
			}
			renewed = append(renewed, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return renewed, nil
}

func checkLease(owner string, ttl time.Duration) error {
	if owner == "" {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "mysql: lease owner is empty")
	}
	if ttl < time.Millisecond {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "mysql: lease ttl must be at least 1ms, got %s", ttl)
	}
	return nil
}

// ReleaseLeases implements hourglass.ClusterStore: the partitions owner
// holds among parts become free (no owner, expired), keeping their epoch.
// Errors: unavailable when the database cannot be reached.
func (s *Store) ReleaseLeases(ctx context.Context, owner string, parts []int) error {
	if len(parts) == 0 || owner == "" {
		return nil
	}
	args := make([]any, 0, len(parts)+1)
	args = append(args, owner)
	for _, p := range parts {
		args = append(args, p)
	}
	return s.inTx(ctx, "release leases", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE cluster_leases SET owner = '', expires_at = 0 WHERE owner = ? AND part IN (`+placeholders(len(parts))+`)`, args...)
		return err
	})
}

// LeaveCluster implements hourglass.ClusterStore: the node's row is
// deleted and its leases released in one transaction. Errors: unavailable
// when the database cannot be reached.
func (s *Store) LeaveCluster(ctx context.Context, nodeID string) error {
	if nodeID == "" {
		return nil
	}
	return s.inTx(ctx, "leave cluster", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM cluster_nodes WHERE id = ?`, nodeID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE cluster_leases SET owner = '', expires_at = 0 WHERE owner = ?`, nodeID)
		return err
	})
}

// writeFeed inserts the order_feed row of timers made due in its
// transaction at now: a group commit's created orders, or an armed named
// timer. The batch calls it last, so that the row's seq is handed out as
// late as possible before the commit makes it visible. With
// Config.AnnounceWithin, timers due later than that after now are left out;
// with none left, it writes nothing.
func (s *Store) writeFeed(ctx context.Context, tx *sql.Tx, now time.Time, timers []hourglass.DueItem) error {
	body := make([]byte, 0, 32*len(timers))
	for _, t := range timers {
		if within := s.cfg.AnnounceWithin; within > 0 && t.At.Sub(now) > within {
			continue // beyond every node's window: its owner's loader brings it
		}
		if len(body) > 0 {
			body = append(body, ',')
		}
		body = strconv.AppendInt(body, t.ID, 10)
		body = append(body, ':')
		body = strconv.AppendInt(body, hourglass.UnixMilli(t.At), 10)
	}
	if len(body) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO order_feed (origin, created_at, body) VALUES (?, `+dbNowMs+`, ?)`, s.origin, string(body)); err != nil {
		return fmt.Errorf("insert order feed: %w", err)
	}
	return nil
}

// parseFeed reads a feed row's body, "<id>:<deadline ms>,…".
func parseFeed(body string, into []hourglass.DueItem) ([]hourglass.DueItem, error) {
	if body == "" {
		return into, nil
	}
	for item := range strings.SplitSeq(body, ",") {
		id, deadline, ok := strings.Cut(item, ":")
		if !ok {
			return into, fmt.Errorf("feed item %q is not <id>:<deadline>", item)
		}
		i, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return into, fmt.Errorf("feed item %q: %w", item, err)
		}
		d, err := strconv.ParseInt(deadline, 10, 64)
		if err != nil {
			return into, fmt.Errorf("feed item %q: %w", item, err)
		}
		into = append(into, hourglass.DueItem{ID: i, At: hourglass.FromUnixMilli(d)})
	}
	return into, nil
}

// WatchCreated implements hourglass.ClusterStore by polling order_feed
// every WatchPollInterval (see the feed above). It calls fn(nil) once it
// has read where the feed stands, and again after a read failed and one
// succeeded (it may have missed rows meanwhile); it skips the rows this
// Store value wrote. While it runs it also deletes feed rows older than
// FeedRetention. It returns nil when ctx ends, and no error otherwise:
// failures are logged and retried at the next poll.
func (s *Store) WatchCreated(ctx context.Context, fn func([]hourglass.DueItem)) error {
	return s.watchFeed(ctx, watchConfig{}, fn)
}

// watchConfig holds WatchCreated's timings; the zero value of each field
// means its constant (tests shorten them).
type watchConfig struct {
	poll, lag, retention, pruneEvery time.Duration
}

// feedCursor is where a watch stands in the feed: rows with seq <= after
// are done; those above it in seen were reported (or skipped), in the
// order they were first seen (order) so that after can move past them
// once they are older than the lag.
type feedCursor struct {
	after   int64
	maxSeen int64
	seen    map[int64]bool
	order   []seenSeq
}

type seenSeq struct {
	seq int64
	at  time.Time
}

func (c *feedCursor) mark(seq int64, at time.Time) {
	c.seen[seq] = true
	c.order = append(c.order, seenSeq{seq, at})
	c.maxSeen = max(c.maxSeen, seq)
}

// advance moves after to the highest seq first seen at or before horizon.
func (c *feedCursor) advance(horizon time.Time) {
	i := 0
	for ; i < len(c.order) && !c.order[i].at.After(horizon); i++ {
		c.after = max(c.after, c.order[i].seq)
		delete(c.seen, c.order[i].seq)
	}
	c.order = c.order[i:]
}

func (s *Store) watchFeed(ctx context.Context, cfg watchConfig, fn func([]hourglass.DueItem)) error {
	cfg.poll = cmp.Or(cfg.poll, WatchPollInterval)
	cfg.lag = cmp.Or(cfg.lag, WatchLag)
	cfg.retention = cmp.Or(cfg.retention, FeedRetention)
	cfg.pruneEvery = cmp.Or(cfg.pruneEvery, feedPruneInterval)
	// The watch runs in real time whatever the store's clock: it measures
	// how long rows have been visible to it.
	clock := hourglass.SystemClock{}
	ticker := time.NewTicker(cfg.poll)
	defer ticker.Stop()
	pruned := make(chan struct{})
	pctx, stopPrune := context.WithCancel(ctx)
	go func() {
		defer close(pruned)
		s.pruneLoop(pctx, cfg)
	}()
	defer func() {
		stopPrune()
		<-pruned
	}()
	var (
		cur    *feedCursor // nil until the start is read
		failed bool        // the last read failed
	)
	for {
		var err error
		if cur == nil {
			if cur, err = s.feedStart(ctx, cfg.lag, clock.Now()); err == nil {
				failed = false
				fn(nil) // what committed before the start: the caller loads it
			}
		} else {
			var timers []hourglass.DueItem
			if timers, err = s.feedPoll(ctx, cur, cfg.lag, clock.Now()); err == nil {
				if failed {
					// The rows of this poll are marked seen: the reload
					// reads them, and whatever the failures hid.
					s.log.Info("mysql: watch created orders: reading the feed again")
					failed = false
					fn(nil)
				} else if len(timers) > 0 {
					fn(timers)
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !failed {
				s.log.Warn("mysql: watch created orders: reading the feed failed; retrying", "err", err)
			}
			failed = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// feedStart reads where the feed stands: the rows written within twice
// the lag are marked seen (not reported: the caller's reload reads them),
// and the cursor starts at the newest row older than that.
func (s *Store) feedStart(ctx context.Context, lag time.Duration, now time.Time) (*feedCursor, error) {
	var dbNow int64
	if err := s.db.QueryRowContext(ctx, `SELECT `+dbNowMs).Scan(&dbNow); err != nil {
		return nil, err
	}
	since := dbNow - 2*lag.Milliseconds()
	c := &feedCursor{seen: map[int64]bool{}}
	rows, err := s.db.QueryContext(ctx, `SELECT seq FROM order_feed WHERE created_at >= ? ORDER BY seq`, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		c.mark(seq, now)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	err = s.db.QueryRowContext(ctx, `SELECT seq FROM order_feed WHERE created_at < ? ORDER BY created_at DESC, seq DESC LIMIT 1`, since).Scan(&c.after)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return c, nil
}

// feedPoll reads the rows of other Store values after the cursor that it
// has not seen, marks them seen and returns their timers, by seq. A row
// above every seq seen comes with its body; one below (it committed
// late) is read again by seq.
func (s *Store) feedPoll(ctx context.Context, c *feedCursor, lag time.Duration, now time.Time) ([]hourglass.DueItem, error) {
	type feedRow struct {
		seq  int64
		body sql.NullString
	}
	var fresh []feedRow
	var late []any
	rows, err := s.db.QueryContext(ctx, `SELECT seq, IF(seq > ?, body, NULL) FROM order_feed WHERE seq > ? AND origin <> ? ORDER BY seq`,
		c.maxSeen, c.after, s.origin)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r feedRow
		if err := rows.Scan(&r.seq, &r.body); err != nil {
			rows.Close()
			return nil, err
		}
		if c.seen[r.seq] {
			continue
		}
		if !r.body.Valid {
			late = append(late, r.seq)
		}
		fresh = append(fresh, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(late) > 0 {
		bodies := map[int64]string{}
		rows, err := s.db.QueryContext(ctx, `SELECT seq, body FROM order_feed WHERE seq IN (`+placeholders(len(late))+`)`, late...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var (
				seq  int64
				body string
			)
			if err := rows.Scan(&seq, &body); err != nil {
				rows.Close()
				return nil, err
			}
			bodies[seq] = body
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for i, r := range fresh {
			if !r.body.Valid {
				// A row pruned in between reads as "": nothing to report.
				fresh[i].body = sql.NullString{String: bodies[r.seq], Valid: true}
			}
		}
	}
	var timers []hourglass.DueItem
	for _, r := range fresh {
		c.mark(r.seq, now)
		if timers, err = parseFeed(r.body.String, timers); err != nil {
			s.log.Error("mysql: watch created orders: skipping a feed row it cannot read", "seq", r.seq, "err", err)
		}
	}
	c.advance(now.Add(-lag))
	return timers, nil
}

// pruneLoop prunes the feed every cfg.pruneEvery until ctx ends. It runs
// beside the polls, never in their way: a DELETE may wait for the lock of
// a feed row whose batch is committing.
func (s *Store) pruneLoop(ctx context.Context, cfg watchConfig) {
	ticker := time.NewTicker(cfg.pruneEvery)
	defer ticker.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(cfg.pruneEvery, 5*time.Second))
		err := s.pruneFeed(pctx, cfg.retention)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Debug("mysql: watch created orders: pruning the feed failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// pruneFeed deletes at most feedPruneLimit feed rows older than retention,
// oldest first (ordered by a unique key: deterministic, so safe for
// statement-based binary logging).
func (s *Store) pruneFeed(ctx context.Context, retention time.Duration) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM order_feed WHERE created_at < `+dbNowMs+` - ? ORDER BY created_at, seq LIMIT `+strconv.Itoa(feedPruneLimit),
		retention.Milliseconds())
	return err
}

var _ hourglass.DueFeed = (*Store)(nil)

// WatchDue implements hourglass.DueFeed: the due items this store value's
// writes commit, and those of the other processes (WatchCreated).
func (s *Store) WatchDue(ctx context.Context, fn func(hourglass.DueUpdate)) (wait func()) {
	return s.w.WatchDue(ctx, s.WatchCreated, fn)
}
