package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the shop's database/sql driver

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/txtimer"
)

// shopDatabase returns a new database that already holds a shop's own
// tables, among them one named orders (as hourglass's), and the shop's
// connection to it.
func shopDatabase(t *testing.T) (string, *sql.DB) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url)
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE public.orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL);
CREATE TABLE public.products (sku TEXT PRIMARY KEY, available INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return url, db
}

func openSchema(t *testing.T, url, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, Schema: schema, MaxConns: testMaxConns})
	if err != nil {
		t.Fatalf("open with schema %q: %v", schema, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestTimerRequestsConformance runs the suite with hourglass's tables in a
// schema of their own (--database-schema) of a database that also holds
// the shop's tables, orders among them.
func TestTimerRequestsConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseTimerRequests(t, hourglasstest.TimerRequestHarness{
		OwnColumns: true,
		Open: func(t *testing.T) (a, b hourglass.TimerRequestStore, timers hourglass.TimerStore, shop *sql.DB, table txtimer.Table) {
			url, db := shopDatabase(t)
			sa, sb := openSchema(t, url, "hourglass"), openSchema(t, url, "hourglass")
			return sa, sb, sa, db, txtimer.Table{Name: "hourglass.timer_requests", Dialect: txtimer.Postgres}
		},
	})
}

// TestDatabaseSchema: --database-schema puts every hourglass table and
// sequence in its schema (created if missing, quoted as the name needs),
// beside a shop's own orders table, which it leaves alone; it refuses a
// URL that names a search_path too, and pg_ names.
func TestDatabaseSchema(t *testing.T) {
	t.Parallel()
	url, shop := shopDatabase(t)
	// Two nodes starting at once both create the schema.
	done := make(chan struct{})
	go func() { defer close(done); openSchema(t, url, "Hour Glass") }()
	openSchema(t, url, "Hour Glass")
	<-done
	var tables []string
	rows, err := shop.QueryContext(t.Context(), `SELECT table_schema || '.' || table_name FROM information_schema.tables
WHERE table_schema IN ('public', 'Hour Glass') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	got := strings.Join(tables, " ")
	for _, want := range []string{"Hour Glass.orders", "Hour Glass.timers", "Hour Glass.timer_requests", "Hour Glass.hourglass_schema_migrations", "public.orders", "public.products"} {
		if !strings.Contains(got, want) {
			t.Errorf("tables %s; want %s among them", got, want)
		}
	}
	if strings.Contains(got, "public.timers") || strings.Contains(got, "public.timer_requests") {
		t.Errorf("tables %s: hourglass wrote into public", got)
	}
	var n int
	if err := shop.QueryRowContext(t.Context(), `SELECT count(*) FROM public.orders`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the shop's orders: %d rows, %v; want its own table untouched", n, err)
	}
	for _, bad := range []struct{ url, schema, want string }{
		{url + "&search_path=other", "hourglass", "give one"},
		{url, "pg_mine", "reserved"},
		{url, strings.Repeat("s", 64), "63 bytes"},
	} {
		_, err := postgres.Open(t.Context(), postgres.Config{URL: bad.url, Schema: bad.schema})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Open(schema %q) = %v; want an error saying %q", bad.schema, err, bad.want)
		}
	}
}

// TestShopRoleNeedsOnlyInsert: the shop's role arms timers with nothing
// but USAGE on hourglass's schema and INSERT on timer_requests (the
// trigger's NOTIFY and the identity column need no more), and can read or
// change nothing else of hourglass's.
func TestShopRoleNeedsOnlyInsert(t *testing.T) {
	t.Parallel()
	url, admin := shopDatabase(t)
	s := openSchema(t, url, "hourglass")
	role := "shop_" + strings.ToLower(rand.Text()[:8])
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA hourglass TO " + role,
		"GRANT INSERT ON hourglass.timer_requests TO " + role,
	} {
		if _, err := admin.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.ExecContext(context.Background(), stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	shop, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	tx, err := shop.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := (txtimer.Table{Dialect: txtimer.Postgres}).Arm(t.Context(), tx, txtimer.Arm{Key: "order:9", Delay: time.Minute}); err != nil {
		t.Fatalf("arm as the shop's role: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit as the shop's role: %v", err)
	}
	select {
	case <-s.TimerRequestsWritten():
	case <-time.After(10 * time.Second):
		t.Error("no NOTIFY after the shop's role committed a request")
	}
	if res, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 10, Room: hourglass.NoTimerLimit}); err != nil || res.Applied != 1 {
		t.Fatalf("apply = %+v, %v; want the shop role's request applied", res, err)
	}
	if _, err := shop.ExecContext(t.Context(), "SELECT count(*) FROM hourglass.timers"); err == nil {
		t.Error("the shop's role read hourglass.timers; want permission denied")
	}
	// seq and requested_at are hourglass's (migration 0009's trigger, which
	// needs no privilege of the shop's role): a role that writes the
	// sequence's next values (OVERRIDING SYSTEM VALUE) and a requested_at
	// of its choosing breaks no other INSERT, and moves no delay.
	for _, seq := range []int64{2, 3, 4, 5, 9223372036854775807} {
		if _, err := shop.ExecContext(t.Context(), `INSERT INTO hourglass.timer_requests (seq, timer_key, delay_ms, requested_at)
OVERRIDING SYSTEM VALUE VALUES ($1, 'explicit', 0, '9999-01-01')`, seq); err != nil {
			t.Fatalf("the shop's role writing seq %d: %v", seq, err)
		}
	}
	for range 3 {
		if err := (txtimer.Table{Dialect: txtimer.Postgres}).Arm(t.Context(), shop, txtimer.Arm{Key: "order:10", Delay: time.Minute}); err != nil {
			t.Fatalf("an arm after the explicit seqs: %v", err)
		}
	}
	if res, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 20, Room: hourglass.NoTimerLimit}); err != nil || res.Applied != 8 {
		t.Fatalf("apply = %+v, %v; want all 8 applied", res, err)
	}
	if tm, err := s.Timer(t.Context(), "explicit"); err != nil || tm.FireAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("the explicit requests' timer = %+v, %v; want it due now", tm, err)
	}
}

// TestTimerRequestInfinity: a shop's 'infinity' (or a time past what a
// bigint of microseconds holds) in fire_at is rejected with its reason, and
// the requests beside it apply: before, the cast of that time to a number
// failed the whole batch, every time, and no request was applied again. A
// requested_at the shop wrote is replaced by the database's (migration
// 0009's trigger): its '-infinity' arms the timer a second from now.
func TestTimerRequestInfinity(t *testing.T) {
	t.Parallel()
	url, db := shopDatabase(t)
	s := openSchema(t, url, "hourglass")
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := db.ExecContext(t.Context(), `INSERT INTO hourglass.timer_requests (timer_key, fire_at, delay_ms, requested_at) VALUES
	('inf-fire', 'infinity', NULL, now()),
	('far-fire', '294276-12-31 23:59:59+00', NULL, now()),
	('inf-requested', NULL, 1000, '-infinity'),
	('fine', $1, NULL, now())`, at); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 10, Room: hourglass.NoTimerLimit})
	if err != nil || res.Applied != 2 || res.Rejected != 2 {
		t.Fatalf("ApplyTimerRequests = %+v, %v; want two applied, two rejected", res, err)
	}
	rej, err := s.RejectedTimerRequests(t.Context(), 0, 10)
	if err != nil || len(rej) != 2 {
		t.Fatalf("rejected = %+v, %v; want two", rej, err)
	}
	want := map[string]string{
		"inf-fire": "fire_at: not a valid time (infinity)",
		"far-fire": "fire_at: not a valid time (out of range)",
	}
	for _, r := range rej {
		if r.Key == nil || r.Reason != want[*r.Key] {
			t.Errorf("rejected %+v: want the reason of its key", r)
		}
	}
	if tm, err := s.Timer(t.Context(), "fine"); err != nil || !tm.FireAt.Equal(at) {
		t.Fatalf("the good request's timer = %+v, %v", tm, err)
	}
	if tm, err := s.Timer(t.Context(), "inf-requested"); err != nil || tm.FireAt.Before(time.Now().Add(-time.Minute)) || tm.FireAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("the timer of the request whose requested_at was -infinity = %+v, %v; want one due in a second", tm, err)
	}
}
