package mysql

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// What the shared suite cannot see of the create feed: rows that commit
// out of seq order, reports never repeated, its own rows skipped, a failed
// read reported as a reload, and pruning.

// watchSetup opens a store on a fresh database and starts its watch with
// cfg; it returns the store, an admin pool on the same database, and the
// watch's reports (a nil slice for fn(nil)).
func watchSetup(t *testing.T, cfg watchConfig) (*Store, *sql.DB, <-chan []hourglass.DueItem) {
	t.Helper()
	return watchSetupLogging(t, cfg, nil)
}

// watchSetupLogging is watchSetup with the store logging to log (nil:
// slog.Default()).
func watchSetupLogging(t *testing.T, cfg watchConfig, log *slog.Logger) (*Store, *sql.DB, <-chan []hourglass.DueItem) {
	t.Helper()
	url := mytest.NewDatabase(t)
	s, err := Open(context.Background(), Config{URL: url, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	admin := mytest.Admin(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan []hourglass.DueItem, 100)
	done := make(chan error, 1)
	go func() { done <- s.watchFeed(ctx, cfg, func(ts []hourglass.DueItem) { reports <- ts }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch returned %v after its context ended, want nil", err)
		}
	})
	if got := next(t, reports); got != nil {
		t.Fatalf("the watch's first report is %v, want nil (reload)", got)
	}
	return s, admin, reports
}

func next(t *testing.T, reports <-chan []hourglass.DueItem) []hourglass.DueItem {
	t.Helper()
	select {
	case ts := <-reports:
		return ts
	case <-time.After(10 * time.Second):
		t.Fatal("no report within 10s")
		return nil
	}
}

// quiet fails if anything is reported within d.
func quiet(t *testing.T, reports <-chan []hourglass.DueItem, d time.Duration) {
	t.Helper()
	select {
	case ts := <-reports:
		t.Fatalf("reported %v, want nothing more", ts)
	case <-time.After(d):
	}
}

// feedRow inserts a feed row of another process through ex, returning its seq.
func feedRow(t *testing.T, ex interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, createdAgo time.Duration, body string) int64 {
	t.Helper()
	res, err := ex.ExecContext(context.Background(), `INSERT INTO order_feed (origin, created_at, body) VALUES ('other', `+dbNowMs+` - ?, ?)`,
		createdAgo.Milliseconds(), body)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func TestWatchLateCommitReportedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lag := time.Second
	_, admin, reports := watchSetup(t, watchConfig{lag: lag})

	// Two transactions: the first takes the lower seq and commits last.
	late, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback()
	lowSeq := feedRow(t, late, 0, "101:1000")
	highSeq := feedRow(t, admin, 0, "102:2000,103:3000")
	if lowSeq >= highSeq {
		t.Fatalf("seqs %d, %d: want the first insert's lower", lowSeq, highSeq)
	}
	got := next(t, reports)
	if len(got) != 2 || got[0].ID != 102 || !got[0].At.Equal(hourglass.FromUnixMilli(2000)) || got[1].ID != 103 {
		t.Fatalf("reported %v, want orders 102 and 103 with their deadlines", got)
	}
	testenv.Phase(t, lag/4, "the watch's polls read the higher row again before the late commit")
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := next(t, reports); len(got) != 1 || got[0].ID != 101 || !got[0].At.Equal(hourglass.FromUnixMilli(1000)) {
		t.Fatalf("reported %v, want the late commit's order 101", got)
	}
	// Past the lag the cursor moves beyond both; nothing comes again, and
	// later rows still do.
	quiet(t, reports, lag+500*time.Millisecond)
	feedRow(t, admin, 0, "104:4000")
	if got := next(t, reports); len(got) != 1 || got[0].ID != 104 {
		t.Fatalf("reported %v, want order 104", got)
	}
	quiet(t, reports, 300*time.Millisecond)
}

// TestWatchSkipsOwnCreates: the watch reports another store value's
// creates, through the group commit's feed row, and not its own.
func TestWatchSkipsOwnCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, reports := watchSetup(t, watchConfig{})
	other, err := Open(ctx, Config{URL: s.cfg.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	create := func(st *Store) hourglass.Order {
		o, _, err := st.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	create(s)
	o := create(other)
	if got := next(t, reports); len(got) != 1 || got[0].ID != o.ID || !got[0].At.Equal(o.Deadline) {
		t.Fatalf("reported %v, want only the other store value's order %d, deadline %s", got, o.ID, o.Deadline)
	}
	quiet(t, reports, 300*time.Millisecond)
}

// TestWatchAnnouncesWithin: a store value with AnnounceWithin writes only
// the orders due within it to the feed (a batch with none, no row).
func TestWatchAnnouncesWithin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, admin, reports := watchSetup(t, watchConfig{})
	other, err := Open(ctx, Config{URL: s.cfg.URL, AnnounceWithin: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	var rowsBefore int
	if err := admin.QueryRow(`SELECT COUNT(*) FROM order_feed`).Scan(&rowsBefore); err != nil {
		t.Fatal(err)
	}
	create := func(timeout time.Duration) hourglass.Order {
		o, _, err := other.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	create(time.Hour) // beyond a minute: not announced, no feed row
	var rows int
	if err := admin.QueryRow(`SELECT COUNT(*) FROM order_feed`).Scan(&rows); err != nil || rows != rowsBefore {
		t.Fatalf("feed rows after an order due in an hour = %d, %v; want %d (none written)", rows, err, rowsBefore)
	}
	soon := create(30 * time.Second)
	if got := next(t, reports); len(got) != 1 || got[0].ID != soon.ID {
		t.Fatalf("reported %v, want only order %d (due within the minute)", got, soon.ID)
	}
	quiet(t, reports, 300*time.Millisecond)
}

// TestWatchReloadsAfterFailedRead: while the feed cannot be read the watch
// reports nothing; once it can, it reports nil (reload), not the rows it
// may have missed one by one.
func TestWatchReloadsAfterFailedRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &lockedBuffer{}
	_, admin, reports := watchSetupLogging(t, watchConfig{}, slog.New(slog.NewTextHandler(logs, nil)))
	if _, err := admin.ExecContext(ctx, `RENAME TABLE order_feed TO order_feed_away`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the watch's read failing", func() bool {
		return strings.Contains(logs.String(), "reading the feed failed")
	})
	if _, err := admin.ExecContext(ctx, `RENAME TABLE order_feed_away TO order_feed`); err != nil {
		t.Fatal(err)
	}
	if got := next(t, reports); got != nil {
		t.Fatalf("after a failed read reported %v, want nil (reload)", got)
	}
	feedRow(t, admin, 0, "7:7000")
	if got := next(t, reports); len(got) != 1 || got[0].ID != 7 {
		t.Fatalf("reported %v, want order 7", got)
	}
}

// TestWatchPrunesFeed: rows older than the retention are deleted, at most
// feedPruneLimit at a time; newer rows stay.
func TestWatchPrunesFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := mytest.NewDatabase(t)
	admin := mytest.Admin(t, url)
	s, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 1,500 rows two minutes old, one a second old.
	for range 15 {
		if _, err := admin.ExecContext(ctx, `INSERT INTO order_feed (origin, created_at, body)
SELECT 'other', `+dbNowMs+` - 120000, '1:1' FROM cluster_leases, (SELECT 1 UNION ALL SELECT 2) two LIMIT 100`); err != nil {
			t.Fatal(err)
		}
	}
	fresh := feedRow(t, admin, time.Second, "2:2")
	count := func() (n int64) {
		t.Helper()
		if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_feed`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := s.pruneFeed(ctx, FeedRetention); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1501-feedPruneLimit {
		t.Fatalf("after one prune %d rows are left, want %d", n, 1501-feedPruneLimit)
	}
	// The watch prunes by itself.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.watchFeed(wctx, watchConfig{pruneEvery: 50 * time.Millisecond}, func([]hourglass.DueItem) {})
	}()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 10*time.Second, "the feed pruned to one row", func() bool { return count() <= 1 })

	var left int64
	if err := admin.QueryRowContext(ctx, `SELECT seq FROM order_feed`).Scan(&left); err != nil || left != fresh {
		t.Fatalf("the row left is %d (%v), want the fresh one %d", left, err, fresh)
	}
}

// TestIdleTransactionEnded: a session of a store value with IdleTxTimeout
// that sits idle inside a transaction holding a row lock (its process was
// paused) is ended by the server, so another store value's write of that
// row goes through within about the timeout, not after the lock wait.
func TestIdleTransactionEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := mytest.NewDatabase(t)
	paused, err := Open(ctx, Config{URL: url, IdleTxTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Close()
	other, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	tx, err := paused.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT available FROM products WHERE sku = 'A' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, _, err := other.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Minute}); err != nil {
		t.Fatalf("a create waiting for the paused session's lock: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the create waited %s for a session idle in its transaction; want about the 1s timeout", waited)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("the idle transaction committed after the server should have ended it")
	}
}
