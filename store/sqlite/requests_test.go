package sqlite_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the other process's database/sql driver

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/sqlite"
	"github.com/hourglass/hourglass/txtimer"
)

// TestTimerRequestsConformance: another process writing the database file
// (database/sql over modernc's driver) arms timers in its own
// transactions. One process owns a SQLite store, so both appliers of the
// suite are the same store value.
func TestTimerRequestsConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseTimerRequests(t, hourglasstest.TimerRequestHarness{
		Open: func(t *testing.T) (a, b hourglass.TimerRequestStore, timers hourglass.TimerStore, shop *sql.DB, table txtimer.Table) {
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			s, err := sqlite.Open(sqlite.Config{Dir: dir, Clock: hourglass.SystemClock{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "hourglass.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			// One connection, as a shop on SQLite keeps for its writes:
			// SQLite runs one write transaction at a time whatever the
			// pool, and its busy handler is not fair. With 16 connections
			// one writer waited out the 10 s busy timeout on a loaded CI
			// machine (SQLITE_BUSY); the pool's queue is first come, first
			// served.
			db.SetMaxOpenConns(1)
			// SQLite reads MySQL's backquotes and ? placeholders.
			return s, s, s, db, txtimer.Table{Name: "main.timer_requests", Dialect: txtimer.MySQL}
		},
	})
}

// TestTimerRequestBadTimeText: SQLite keeps times as TEXT, so a shop can
// write a fire_at that is not a time; it is rejected naming its column,
// and a good request beside it is applied. A requested_at the shop writes
// is not kept (TestTimerRequestOwnColumns): one that is not a time is
// replaced by the database's clock, not rejected.
func TestTimerRequestBadTimeText(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(sqlite.Config{Dir: dir, Clock: hourglass.SystemClock{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "hourglass.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := db.Exec(`INSERT INTO timer_requests (timer_key, fire_at) VALUES ('late', 'next tuesday'), ('fine', ?)`+
		`; INSERT INTO timer_requests (timer_key, delay_ms, requested_at) VALUES ('when', 1000, 'yesterday')`, at.Format("2006-01-02 15:04:05.000")); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 10, Room: hourglass.NoTimerLimit})
	if err != nil || res.Applied != 2 || res.Rejected != 1 {
		t.Fatalf("ApplyTimerRequests = %+v, %v; want two applied, one rejected", res, err)
	}
	rej, err := s.RejectedTimerRequests(t.Context(), 0, 10)
	if err != nil || len(rej) != 1 || !strings.HasPrefix(rej[0].Reason, "fire_at: ") || rej[0].FireAt != nil {
		t.Fatalf("rejected = %+v, %v; want the bad fire_at, named", rej, err)
	}
	if tm, err := s.Timer(t.Context(), "fine"); err != nil || !tm.FireAt.Equal(at) {
		t.Fatalf("the good request's timer = %+v, %v", tm, err)
	}
}

// TestTimerRequestOwnColumns: another process cannot set timer_requests'
// seq or requested_at. A seq at the int64 maximum left AUTOINCREMENT no
// key for any later INSERT; with the table's trigger the row gets the next
// seq, later INSERTs go on, and a requested_at of the writer's choosing is
// replaced by the database's clock.
func TestTimerRequestOwnColumns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(sqlite.Config{Dir: dir, Clock: hourglass.SystemClock{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "hourglass.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`INSERT INTO timer_requests (timer_key, delay_ms) VALUES ('first', 3600000)`,
		`INSERT INTO timer_requests (seq, timer_key, delay_ms) VALUES (9223372036854775807, 'max', 3600000)`,
		`INSERT INTO timer_requests (timer_key, delay_ms, requested_at) VALUES ('old', 3600000, '2000-01-01 00:00:00.000')`,
		`INSERT INTO timer_requests (timer_key, delay_ms) VALUES ('after', 3600000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := db.Query(`SELECT seq, timer_key, requested_at FROM timer_requests ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for rows.Next() {
		var (
			seq      int64
			key, req string
		)
		if err := rows.Scan(&seq, &key, &req); err != nil {
			t.Fatal(err)
		}
		if want := int64(len(keys) + 1); seq != want {
			t.Errorf("%s: seq %d; want %d", key, seq, want)
		}
		if strings.HasPrefix(req, "2000-") {
			t.Errorf("%s: requested_at %s, the writer's", key, req)
		}
		keys = append(keys, key)
	}
	rows.Close()
	if want := "first max old after"; strings.Join(keys, " ") != want {
		t.Fatalf("rows %v; want %s", keys, want)
	}
	res, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 10, Room: hourglass.NoTimerLimit})
	if err != nil || res.Applied != 4 {
		t.Fatalf("ApplyTimerRequests = %+v, %v; want four applied", res, err)
	}
	// Armed an hour from the database's clock, not from the year 2000.
	if tm, err := s.Timer(t.Context(), "old"); err != nil || time.Until(tm.FireAt) < 50*time.Minute {
		t.Fatalf("the timer of the request with a forged requested_at = %+v, %v; want due in about an hour", tm, err)
	}
}
