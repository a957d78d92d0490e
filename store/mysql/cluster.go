package mysql

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// The cluster (hourglass.ClusterStore) in three tables (migration 0004):
// cluster_nodes and cluster_leases, whose SQL is package sqlq's
// (sqlq.Cluster, embedded in Store; db_node is Dialect.DBNode); and
// order_feed, through which a process learns of the orders the others
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
