package processtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/txtimer"
)

// TestClusterTimerRequests (issue 21): three nodes apply the requests a
// shop commits (3,000 arms from 16 writers over 6 s, one in ten cancelled
// in a second transaction, their fire time a takeover later), one node
// SIGKILLed halfway: each request is applied once (the table ends empty),
// each timer ends as its last request left it, each armed one fires
// exactly once (one timer.fired event), none early, none later than the
// lease TTL + 2 s after its fire_at. On PostgreSQL (hourglass in its own
// schema beside the shop's orders) and MariaDB (the shop by qualified
// name).
func TestClusterTimerRequests(t *testing.T) {
	testenv.Require(t, testenv.Processes)
	for _, kind := range []string{store.KindPostgres, store.KindMySQL} {
		t.Run(kind, func(t *testing.T) {
			const ttl = 2 * time.Second
			var (
				dbURL string
				shop  *sql.DB
				table txtimer.Table
				args  []string
				qual  string // how the shop names hourglass's tables
			)
			switch kind {
			case store.KindPostgres:
				dbURL = pgtest.NewDatabase(t)
				db, err := sql.Open("pgx", dbURL)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				if _, err := db.Exec(`CREATE TABLE public.orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
					t.Fatal(err)
				}
				shop, qual, args = db, "hourglass.", []string{"--database-schema", "hourglass"}
			default:
				dbURL = mytest.NewDatabase(t)
				u, err := url.Parse(dbURL)
				if err != nil {
					t.Fatal(err)
				}
				shop, qual = mytest.Admin(t, dbURL), strings.TrimPrefix(u.Path, "/")+"."
			}
			table = txtimer.Table{Name: qual + "timer_requests", Dialect: map[string]txtimer.Dialect{store.KindPostgres: txtimer.Postgres, store.KindMySQL: txtimer.MySQL}[kind]}
			s := startCluster(t, []string{dbURL}, 3, ttl, args...)

			const requests, writers = 3000, 16
			start := time.Now()
			var (
				next, failed atomic.Int64
				firstErr     atomic.Value
				wg           sync.WaitGroup
			)
			commit := func(fn func(tx *sql.Tx) error) {
				tx, err := shop.BeginTx(context.Background(), nil)
				if err == nil {
					if err = fn(tx); err == nil {
						err = tx.Commit()
					} else {
						tx.Rollback()
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
			for range writers {
				wg.Go(func() {
					for i := next.Add(1) - 1; i < requests; i = next.Add(1) - 1 {
						if !testenv.Until(t.Context(), start.Add(6*time.Second*time.Duration(i)/requests)) {
							return
						}
						key := fmt.Sprintf("k%05d", i)
						fireAt := start.Add(2*time.Second + 6*time.Second*time.Duration(i)/requests)
						if i%10 == 0 {
							// A cancel applied after fire_at loses to the fire
							// (documented), and the killed node's requests wait
							// for its leases: the keys cancelled fire late
							// enough that their cancel is applied first even
							// after a takeover.
							fireAt = fireAt.Add(ttl + 5*time.Second)
						}
						commit(func(tx *sql.Tx) error {
							return table.Arm(context.Background(), tx, txtimer.Arm{Key: key, FireAt: fireAt})
						})
						if i%10 == 0 {
							commit(func(tx *sql.Tx) error { return table.Cancel(context.Background(), tx, key) })
						}
					}
				})
			}
			testenv.Phase(t, max(time.Until(start.Add(3*time.Second)), 0), "the shop writes while three nodes apply, before the SIGKILL")
			victim := s.cluster.Node(2)
			if err := victim.Kill(); err != nil {
				t.Fatal(err)
			}
			t.Logf("SIGKILLed %s at %s", victim.ID(), time.Since(start).Round(time.Millisecond))
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d shop transactions failed; the first: %v", n, firstErr.Load())
			}
			// Every request applied, every armed timer fired.
			count := func(q string) int {
				var n int
				if err := shop.QueryRow(q).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			}
			var logged time.Time
			testenv.EventuallyEvery(t, time.Until(start.Add(8*time.Second+ttl+20*time.Second)), 100*time.Millisecond,
				"every request applied and every armed timer fired, 20 s after the last fire time", func() bool {
					left := count("SELECT count(*) FROM " + qual + "timer_requests")
					scheduled := count("SELECT count(*) FROM " + qual + "timers WHERE status = 'scheduled'")
					if (left > 0 || scheduled > 0) && time.Since(logged) >= time.Second { // the last line is the count on a failure
						logged = time.Now()
						t.Logf("%d requests not applied, %d timers not fired yet", left, scheduled)
					}
					return left == 0 && scheduled == 0
				})
			cancelled := requests / 10
			if n := count("SELECT count(*) FROM " + qual + "timers"); n != requests {
				t.Errorf("%d timers; want %d, one per key", n, requests)
			}
			if n := count("SELECT count(*) FROM " + qual + "timers WHERE status = 'cancelled'"); n != cancelled {
				t.Errorf("%d timers cancelled; want %d (the keys cancelled in a second transaction)", n, cancelled)
			}
			fired := count("SELECT count(*) FROM " + qual + "timers WHERE status = 'fired'")
			if fired != requests-cancelled {
				t.Errorf("%d timers fired; want %d", fired, requests-cancelled)
			}
			if n := count("SELECT count(*) FROM " + qual + "timers WHERE status = 'fired' AND fired_at < fire_at"); n != 0 {
				t.Errorf("%d timers fired before their fire_at", n)
			}
			if n := count(fmt.Sprintf("SELECT count(*) FROM %stimers WHERE status = 'fired' AND fired_at > fire_at + %d", qual, (ttl + 2*time.Second).Milliseconds())); n != 0 {
				t.Errorf("%d timers fired more than the lease TTL + 2 s after their fire_at", n)
			}
			if n := count("SELECT count(*) FROM (SELECT order_id FROM " + qual + "events WHERE type = 'timer.fired' GROUP BY order_id HAVING count(*) <> 1) AS x"); n != 0 {
				t.Errorf("%d timers have more than one timer.fired event", n)
			}
			if n := count("SELECT count(DISTINCT order_id) FROM " + qual + "events WHERE type = 'timer.fired'"); n != fired {
				t.Errorf("%d timers have a timer.fired event; want the %d fired", n, fired)
			}
			var worst int64
			if err := shop.QueryRow("SELECT COALESCE(max(fired_at - fire_at), 0) FROM " + qual + "timers WHERE status = 'fired'").Scan(&worst); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d requests applied across 3 nodes (one killed); %d fired once each, %d cancelled; worst lateness %d ms", requests+cancelled, fired, cancelled, worst)
		})
	}
}
