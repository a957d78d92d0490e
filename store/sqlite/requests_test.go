package sqlite_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

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
			// SQLite reads MySQL's backquotes and ? placeholders.
			return s, s, s, db, txtimer.Table{Name: "main.timer_requests", Dialect: txtimer.MySQL}
		},
	})
}
