package sqlite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// BenchmarkArmTimer arms timers from 64 concurrent callers (as API calls
// share each group commit) and reports arms per second: new keys (an
// insert each), re-arms of existing keys with a new request hash (an
// update each), and cancels of scheduled timers (one each). Profile it with
// -cpuprofile to see where an arm's time goes.
func BenchmarkArmTimer(b *testing.B) {
	payload := []byte(`{"order":"o-123","attempt":1}`)
	for _, mode := range []string{"new", "rearm", "cancel"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var next atomic.Int64
			key := func(i int64) string { return fmt.Sprint("timer-", i) }
			switch mode {
			case "rearm":
				seedTimers(b, s, 10_000, time.Hour)
				key = func(i int64) string { return fmt.Sprint("timer-", i%10_000) }
			case "cancel": // one scheduled timer per cancel
				seedTimers(b, s, b.N+1, time.Hour)
			}
			b.SetParallelism(32) // 64 callers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					var err error
					if mode == "cancel" {
						_, err = s.CancelTimer(ctx, key(i))
					} else {
						_, _, err = s.ArmTimer(ctx, hourglass.ArmTimerParams{Key: key(i), Delay: time.Hour, Payload: payload, RequestHash: fmt.Append(nil, i)})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// seedTimers inserts n scheduled timers (keys timer-0 … timer-<n-1>) due
// after delay with one set-based statement, and returns the first id.
func seedTimers(tb testing.TB, s *Store, n int, delay time.Duration) (firstID int64) {
	tb.Helper()
	err := s.write(context.Background(), func(conn *sqlite.Conn, now time.Time) error {
		stmt := conn.Prep(`SELECT coalesce(max(id), ?1 - 1) + 1 FROM timers`)
		stmt.BindInt64(1, hourglass.TimerIDBase)
		if _, err := step(stmt, func(st *sqlite.Stmt) { firstID = st.ColumnInt64(0) }); err != nil {
			return err
		}
		// Keys are numbered from the first id, so seeding twice never collides.
		return sqlitex.Execute(conn, `WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < ?1 - 1)
INSERT INTO timers (id, key, status, fire_at, payload, request_hash, created_at, updated_at)
SELECT ?2 + i, 'timer-' || (?2 + i - ?5), 'scheduled', ?3, '{"n":1}', x'00', ?4, ?4 FROM k`,
			&sqlitex.ExecOptions{Args: []any{n, firstID, hourglass.UnixMilli(now.Add(delay)), hourglass.UnixMilli(now), hourglass.TimerIDBase}})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return firstID
}

// BenchmarkFireTimersBurst fires a backlog of timers all due at one instant
// through FireTimers, in batches of 512 (a burst) or 16 (about what a
// steady 2,000 timers/s hands the dispatcher at a time) from two callers (as
// the dispatcher's workers do), with and without webhooks, and reports fires
// per second: the store's half of the fire path, as
// BenchmarkCloseOrdersBurst is for closes.
func BenchmarkFireTimersBurst(b *testing.B) {
	for _, c := range []struct{ batch, webhooks int }{{512, 0}, {512, 5}, {16, 0}} {
		batch, webhooks := int64(c.batch), c.webhooks
		b.Run(fmt.Sprintf("batch=%d/webhooks=%d", batch, webhooks), func(b *testing.B) {
			const n = 50_000
			clock := hourglasstest.NewClock(hourglasstest.Epoch)
			s := openAt(b, clock)
			subscribeAll(b, s, webhooks)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				first := seedTimers(b, s, n, 0)
				clock.Advance(time.Millisecond)
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				next := make(chan int64)
				for range 2 {
					wg.Go(func() {
						for lo := range next {
							ids := make([]int64, 0, batch)
							for id := lo; id < min(lo+batch, first+n); id++ {
								ids = append(ids, id)
							}
							fired, err := s.FireTimers(ctx, ids)
							if err != nil || len(fired) != len(ids) {
								b.Errorf("fired %d of %d: %v", len(fired), len(ids), err)
							}
						}
					})
				}
				for lo := first; lo < first+n; lo += batch {
					next <- lo
				}
				close(next)
				wg.Wait()
				b.ReportMetric(n/time.Since(start).Seconds(), "fires/s")
			}
		})
	}
}
