package sqlite

import (
	"context"
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
	hourglasstest.RemindBurstBench(b, []hourglasstest.BurstShape{{Batch: 256, Callers: 2}, {Batch: 1024, Callers: 2}, {Batch: 2048, Callers: 2}},
		func(tb testing.TB, clock *hourglasstest.Clock) *Store { return openAt(tb, clock) },
		func(tb testing.TB, s *Store, sku string, n int, at, deadline time.Time) int64 {
			first := seedBurst(tb, s, sku, n, deadline)
			remindAt(tb, s, first, n, at)
			return first
		})
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
