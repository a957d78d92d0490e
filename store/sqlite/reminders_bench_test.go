package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass/hourglass/hourglasstest"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// BenchmarkRemindOrdersBurst sends the reminders of a backlog of orders all
// reminded at one instant through RemindOrders, in batches of the given
// size with the given callers, and reports reminders per second; the same
// orders' closes (CloseOrders, with the same batches and callers) are
// measured alternately, so the two per-item costs compare within one run:
//
//	go test -run '^$' -bench RemindOrdersBurst -count 3 ./store/sqlite/
func BenchmarkRemindOrdersBurst(b *testing.B) {
	for _, c := range []struct{ batch, callers int }{{256, 2}, {1024, 2}, {2048, 2}} {
		for _, what := range []string{"remind", "close"} {
			b.Run(fmt.Sprintf("%s/batch=%d/callers=%d", what, c.batch, c.callers), func(b *testing.B) {
				const n = 100_000
				clock := hourglasstest.NewClock(hourglasstest.Epoch)
				s := openAt(b, clock)
				for range b.N {
					b.StopTimer()
					first := seedBurst(b, s, fmt.Sprintf("SKU%d", b.N), n, clock.Now().Add(time.Minute))
					remindAt(b, s, first, n, clock.Now())
					clock.Advance(time.Millisecond)
					if what == "close" {
						clock.Advance(time.Minute)
					}
					b.StartTimer()
					b.ReportMetric(hourglasstest.SettleBurst(b, s, what == "close", first, n, c.batch, c.callers), what+"s/s")
				}
			})
		}
	}
}

// remindAt sets the reminder of the n orders from first to at.
func remindAt(tb testing.TB, s *Store, first int64, n int, at time.Time) {
	tb.Helper()
	err := s.write(context.Background(), func(conn *sqlite.Conn, _ time.Time) error {
		return sqlitex.Execute(conn, `UPDATE orders SET remind_at = ?1, remind_before_ms = 60000 WHERE id BETWEEN ?2 AND ?3`,
			&sqlitex.ExecOptions{Args: []any{at.UnixMilli(), first, first + int64(n) - 1}})
	})
	if err != nil {
		tb.Fatal(err)
	}
}
