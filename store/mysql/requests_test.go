package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/storetest"
	"github.com/hourglass/hourglass/txtimer"
)

// shopDB connects, as a shop's service would (go-sql-driver/mysql, its
// defaults: server-side prepared statements), to the database at shopURL,
// in a session whose time_zone is not UTC: requested_at must be UTC all
// the same. Extra session variables (name, value pairs) are set too: a
// shop reading through another Galera node than hourglass writes through
// asks for causal reads (wsrep_sync_wait), or may read a row before that
// node applied hourglass's close. It is closed in t.Cleanup.
func shopDB(t *testing.T, shopURL string, vars ...string) *sql.DB {
	t.Helper()
	cfg, err := myurl.Parse(shopURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{"time_zone": "'+05:00'"}
	for i := 0; i+1 < len(vars); i += 2 {
		cfg.Params[vars[i]] = vars[i+1]
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

// requestTable is hourglass's request table at hourglassURL as a shop in
// another database of the server names it: <database>.timer_requests.
func requestTable(t *testing.T, hourglassURL string) txtimer.Table {
	t.Helper()
	cfg, err := myurl.Parse(hourglassURL)
	if err != nil {
		t.Fatal(err)
	}
	return txtimer.Table{Name: cfg.DBName + ".timer_requests", Dialect: txtimer.MySQL}
}

// TestTimerRequestsConformance: the shop works in a database of its own on
// the same server and reaches hourglass's by qualified name, so every
// request crosses databases inside the shop's transaction.
func TestTimerRequestsConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseTimerRequests(t, hourglasstest.TimerRequestHarness{
		OwnColumns: true,
		Open: func(t *testing.T) (a, b hourglass.TimerRequestStore, timers hourglass.TimerStore, shop *sql.DB, table txtimer.Table) {
			url := mytest.NewDatabaseFrom(t, storetest.MySQLMigrated())
			sa, sb := open(t, url, nil, false), open(t, url, nil, false)
			return sa, sb, sa, shopDB(t, mytest.NewDatabase(t)), requestTable(t, url)
		},
	})
}

// TestGaleraTimerRequestsConformance runs the suite on a 3-node Galera
// cluster: the two appliers on nodes 1 and 2 (SKIP LOCKED sees a node's own
// locks only: the two may take the same requests, and certification lets
// one commit), the shop on node 3, in a database of its own.
func TestGaleraTimerRequestsConformance(t *testing.T) {
	t.Parallel()
	// In the Matrix tier (every other store): the whole suite on three
	// nodes costs the cluster minutes of CPU, and its Go side is
	// MariaDB's, which the Default tier runs under -race.
	testenv.Require(t, testenv.Matrix)
	galeratest.Nodes(t)
	hourglasstest.ExerciseTimerRequests(t, hourglasstest.TimerRequestHarness{
		OwnColumns: true,
		Open: func(t *testing.T) (a, b hourglass.TimerRequestStore, timers hourglass.TimerStore, shop *sql.DB, table txtimer.Table) {
			urls, shops := galeratest.NewDatabaseFrom(t, storetest.MySQLMigrated()), galeratest.NewDatabase(t)
			sa, sb := open(t, urls[0], nil, false), open(t, urls[1], nil, false)
			table = requestTable(t, urls[0])
			awaitTable(t, shops[2], table.Name)
			return sa, sb, sa, shopDB(t, shops[2], "wsrep_sync_wait", "1"), table
		},
	})
}

// awaitTable returns once the Galera node of url has applied every write
// set committed in the cluster so far (wsrep_sync_wait), the migrations
// that created table on another node included.
func awaitTable(t *testing.T, url, table string) {
	t.Helper()
	ctx := t.Context()
	conn, err := mytest.Admin(t, url).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("%s on the shop's node: %v", table, err)
	}
}

// TestTimerRequestsShopPrivileges is the README's layout: the shop's user
// may write its own database and only INSERT into hourglass's
// timer_requests, and its order and its timer commit together.
func TestTimerRequestsShopPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hgURL, shopURL := mytest.NewDatabase(t), mytest.NewDatabase(t)
	s := open(t, hgURL, nil, false)
	admin := mytest.Admin(t, hgURL)
	hgCfg, _ := myurl.Parse(hgURL)
	shopCfg, _ := myurl.Parse(shopURL)
	user := "hg_shop_" + strings.ToLower(rand.Text()[:8])
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'shop-pw'",
		"GRANT ALL ON `" + shopCfg.DBName + "`.* TO '" + user + "'@'%'",
		"GRANT INSERT ON `" + hgCfg.DBName + "`.timer_requests TO '" + user + "'@'%'",
		"CREATE TABLE `" + shopCfg.DBName + "`.orders (id BIGINT PRIMARY KEY, total BIGINT NOT NULL) ENGINE = InnoDB",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	shop, table := shopDB(t, withUser(t, shopURL, user, "shop-pw")), requestTable(t, hgURL)
	for i, commit := range []bool{false, true} {
		tx, err := shop.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, total) VALUES (?, 1999)", i+1); err != nil {
			t.Fatal(err)
		}
		if err := table.Arm(ctx, tx, txtimer.Arm{Key: "order:" + string(rune('1'+i)), Delay: 30 * time.Minute}); err != nil {
			t.Fatalf("arm as a user with INSERT only on timer_requests: %v", err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.ApplyTimerRequests(ctx, hourglass.TimerRequestsParams{Limit: 10, Room: hourglass.NoTimerLimit})
	if err != nil || res.Applied != 1 || len(res.Armed) != 1 {
		t.Fatalf("ApplyTimerRequests = %+v, %v; want the committed arm applied", res, err)
	}
	if _, err := s.Timer(ctx, "order:1"); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Errorf("the rolled-back order's timer: %v; want not_found", err)
	}
	if tm, err := s.Timer(ctx, "order:2"); err != nil || tm.Status != hourglass.TimerScheduled {
		t.Errorf("the committed order's timer = %+v, %v; want scheduled", tm, err)
	}
}

// TestPrivilegeCheckCoversTimerRequests: a service user that may not
// delete from timer_requests (table-level GRANTs that left it out) is
// refused at Open with the GRANT to run, instead of failing every apply.
func TestPrivilegeCheckCoversTimerRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := mytest.NewDatabase(t)
	if _, err := mysql.Migrate(ctx, mysql.Config{URL: dbURL}); err != nil {
		t.Fatal(err)
	}
	admin := mytest.Admin(t, dbURL)
	cfg, _ := myurl.Parse(dbURL)
	app := "hg_app_" + strings.ToLower(rand.Text()[:8])
	if _, err := admin.ExecContext(ctx, "CREATE USER '"+app+"'@'%' IDENTIFIED BY 'app-pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS '" + app + "'@'%'") })
	rows, err := admin.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, name := range tables {
		privileges := "SELECT, INSERT, UPDATE, DELETE"
		if name == "timer_requests" {
			privileges = "SELECT, INSERT, UPDATE"
		}
		if _, err := admin.ExecContext(ctx, "GRANT "+privileges+" ON `"+cfg.DBName+"`.`"+name+"` TO '"+app+"'@'%'"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := mysql.Open(ctx, mysql.Config{URL: withUser(t, dbURL, app, "app-pw")})
	if err == nil {
		s.Close()
		t.Fatal("Open as a user who may not delete from timer_requests succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "may not write timer_requests in") || !strings.Contains(msg, "GRANT SELECT, INSERT, UPDATE, DELETE") {
		t.Fatalf("Open: %q; want one line naming timer_requests and the GRANT to run", msg)
	}
}

// TestTimerRequestZeroDates: a shop whose session allows zero dates can
// write one into fire_at or requested_at; the request is rejected naming
// the column, the listing keeps the zero fire_at as a zero time, and a good
// request beside them is applied.
func TestTimerRequestZeroDates(t *testing.T) {
	t.Parallel()
	url := mytest.NewDatabase(t)
	s := open(t, url, nil, false)
	conn, err := mytest.Admin(t, url).Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), `SET SESSION sql_mode = ''`); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := conn.ExecContext(t.Context(), `INSERT INTO timer_requests (timer_key, fire_at, delay_ms, requested_at) VALUES
	('zero-fire', '0000-00-00 00:00:00', NULL, UTC_TIMESTAMP(3)),
	('zero-requested', NULL, 1000, '0000-00-00 00:00:00'),
	('fine', ?, NULL, UTC_TIMESTAMP(3))`, at.Format("2006-01-02 15:04:05.000")); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 10, Room: hourglass.NoTimerLimit})
	// requested_at is the server's whatever the shop wrote (migration
	// the trigger of owncolumns.go): the zero one arms its timer a second from now.
	if err != nil || res.Applied != 2 || res.Rejected != 1 {
		t.Fatalf("ApplyTimerRequests = %+v, %v; want two applied, one rejected", res, err)
	}
	rej, err := s.RejectedTimerRequests(t.Context(), 0, 10)
	if err != nil || len(rej) != 1 {
		t.Fatalf("rejected = %+v, %v; want one", rej, err)
	}
	if r := rej[0]; r.Reason != "fire_at: not a valid time (a zero date)" || r.FireAt == nil || !r.FireAt.IsZero() || r.RequestedAt.IsZero() {
		t.Errorf("rejected[0] = %+v; want the zero fire_at, named", r)
	}
	if tm, err := s.Timer(t.Context(), "zero-requested"); err != nil || tm.FireAt.Before(time.Now().Add(-time.Minute)) || tm.FireAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("the timer of the zero requested_at = %+v, %v; want one due in a second", tm, err)
	}
	if tm, err := s.Timer(t.Context(), "fine"); err != nil || !tm.FireAt.Equal(at) {
		t.Fatalf("the good request's timer = %+v, %v", tm, err)
	}
}

// TestShopUserNeedsOnlyInsert runs docs/timers.md's grant as written: a
// shop's user with INSERT on timer_requests alone arms timers, and cannot
// break the table for the others: its INSERT naming seq at the BIGINT
// maximum (which made every later INSERT fail with error 167 until an
// ALTER TABLE) or a requested_at of its own is overridden by migration
// the trigger of owncolumns.go, even under NO_AUTO_VALUE_ON_ZERO.
func TestShopUserNeedsOnlyInsert(t *testing.T) {
	t.Parallel()
	url := mytest.NewDatabase(t)
	s := open(t, url, nil, false)
	admin := mytest.Admin(t, url)
	table := requestTable(t, url)
	user := "shop_" + strings.ToLower(rand.Text()[:8])
	db, _, _ := strings.Cut(table.Name, ".")
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'shop-pw'",
		"GRANT INSERT ON " + db + ".timer_requests TO '" + user + "'@'%'", // docs/timers.md
	} {
		if _, err := admin.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	cfg, err := myurl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, "shop-pw"
	cfg.Params = map[string]string{"sql_mode": "'NO_AUTO_VALUE_ON_ZERO'"}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	shop := sql.OpenDB(conn)
	defer shop.Close()
	for _, seq := range []int64{0, 2, 3, 9223372036854775807} {
		if _, err := shop.ExecContext(t.Context(), "INSERT INTO "+table.Name+" (seq, timer_key, delay_ms, requested_at) VALUES (?, 'explicit', 0, '9999-01-01')", seq); err != nil {
			t.Fatalf("the shop's INSERT naming seq %d: %v", seq, err)
		}
	}
	for range 3 {
		if err := table.Arm(t.Context(), shop, txtimer.Arm{Key: "order:10", Delay: time.Minute}); err != nil {
			t.Fatalf("an arm after the explicit seqs: %v", err)
		}
	}
	if _, err := shop.ExecContext(t.Context(), "SELECT count(*) FROM "+db+".timers"); err == nil {
		t.Error("the shop's user read timers; want it refused")
	}
	if res, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 20, Room: hourglass.NoTimerLimit}); err != nil || res.Applied != 7 {
		t.Fatalf("apply = %+v, %v; want all 7 applied", res, err)
	}
	if tm, err := s.Timer(t.Context(), "explicit"); err != nil || tm.FireAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("the explicit requests' timer = %+v, %v; want it due now", tm, err)
	}
}
