package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"zombiezen.com/go/sqlite"
)

// BenchmarkPendingDeliveries reads a burst's pending deliveries 8 at a time,
// as the webhook workers' reads do, among 20,000 pending ones (the closes
// of a burst with one webhook subscribed to every event). Old and new
// code measured the same here (130-136 µs a read, machine B): the burst
// test's spread between runs is the dynamics of the scan and the reads.
func BenchmarkPendingDeliveries(b *testing.B) {
	const n = 20_000
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s := openAt(b, clock)
	subscribeAll(b, s, 1)
	ctx := context.Background()
	first := seedBurst(b, s, "SKU", n, clock.Now())
	clock.Advance(time.Millisecond)
	for lo := first; lo < first+n; lo += 500 {
		ids := make([]int64, 0, 500)
		for id := lo; id < min(lo+500, first+n); id++ {
			ids = append(ids, id)
		}
		if _, err := s.CloseOrders(ctx, ids); err != nil {
			b.Fatal(err)
		}
	}
	var deliveries []int64
	testenv.EventuallyEvery(b, time.Minute, 100*time.Millisecond, "the burst's deliveries written", func() bool {
		deliveries = deliveries[:0]
		err := s.read(ctx, func(conn *sqlite.Conn) error {
			stmt := conn.Prep(`SELECT id FROM webhook_deliveries ORDER BY id`)
			defer stmt.Reset()
			for {
				row, err := stmt.Step()
				if err != nil || !row {
					return err
				}
				deliveries = append(deliveries, stmt.ColumnInt64(0))
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		return len(deliveries) == n
	})
	b.ResetTimer()
	for i := range b.N {
		lo := (i * 8) % (n - 8)
		got, err := s.PendingDeliveries(ctx, deliveries[lo:lo+8])
		if err != nil || len(got) != 8 {
			b.Fatalf("read %d of 8: %v", len(got), err)
		}
	}
}
