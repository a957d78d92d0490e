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
// write a fire_at or a requested_at that is not a time; each is rejected
// naming its column (a delay counted from an unreadable requested_at was
// counted from the apply, silently late), and a good request beside them
// is applied.
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
	if err != nil || res.Applied != 1 || res.Rejected != 2 {
		t.Fatalf("ApplyTimerRequests = %+v, %v; want one applied, two rejected", res, err)
	}
	rej, err := s.RejectedTimerRequests(t.Context(), 0, 10)
	if err != nil || len(rej) != 2 || !strings.HasPrefix(rej[0].Reason, "fire_at: ") || rej[0].FireAt != nil {
		t.Fatalf("rejected = %+v, %v; want the bad fire_at, named", rej, err)
	}
	if r := rej[1]; !strings.HasPrefix(r.Reason, `requested_at: "yesterday" is not a time`) || !r.RequestedAt.IsZero() {
		t.Fatalf("rejected[1] = %+v; want the bad requested_at, named", r)
	}
	if tm, err := s.Timer(t.Context(), "fine"); err != nil || !tm.FireAt.Equal(at) {
		t.Fatalf("the good request's timer = %+v, %v", tm, err)
	}
}
