package postgres_test

import (
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the shop's database/sql driver

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/txtimer"
)

func TestTimerRequestsConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseTimerRequests(t, hourglasstest.TimerRequestHarness{
		Open: func(t *testing.T) (a, b hourglass.TimerRequestStore, timers hourglass.TimerStore, shop *sql.DB, table txtimer.Table) {
			url := pgtest.NewDatabase(t)
			sa, sb := open(t, url, nil, false), open(t, url, nil, false)
			db, err := sql.Open("pgx", url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return sa, sb, sa, db, txtimer.Table{Name: "public.timer_requests", Dialect: txtimer.Postgres}
		},
	})
}
