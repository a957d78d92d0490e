package hourglasstest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseStats covers StatsStore: OrderCounts, CountPendingDue,
// PendingDeadlineBuckets.
func exerciseStats(t *testing.T, h StoreHarness) {
	t.Run("Counts", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 1000)
		counts := func(t *testing.T, now time.Time) map[hourglass.State]int64 {
			t.Helper()
			got, err := f.db.OrderCounts(f.ctx, now)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		zero := map[hourglass.State]int64{}
		for _, st := range hourglass.States() {
			zero[st] = 0
		}
		if got := counts(t, Epoch); !maps.Equal(got, zero) {
			t.Fatalf("OrderCounts of an empty database = %v, want every state at 0", got)
		}
		// Created at Epoch: deadlines at Epoch + timeout.
		for _, d := range []time.Duration{10 * time.Second, 10 * time.Second, 11 * time.Second, 20 * time.Second, 35 * time.Second, 5 * time.Minute} {
			f.create(t, d, item("A", 1))
		}
		paid := f.create(t, time.Minute, item("A", 1))
		f.pay(t, paid.ID, "p1")
		shipped := f.create(t, time.Minute, item("A", 1))
		f.pay(t, shipped.ID, "p2")
		f.transition(t, shipped.ID, hourglass.ActionShip)
		completed := f.create(t, time.Minute, item("A", 1))
		f.pay(t, completed.ID, "p3")
		f.transition(t, completed.ID, hourglass.ActionShip)
		f.transition(t, completed.ID, hourglass.ActionComplete)
		cancelled := f.create(t, time.Minute, item("A", 1))
		f.transition(t, cancelled.ID, hourglass.ActionCancel)
		f.create(t, time.Second, item("A", 1)) // overdue: due at now, not closed yet
		closed := f.create(t, time.Second, item("A", 1))
		f.clock.Advance(time.Second)
		if got := f.closeOrders(t, closed.ID); len(got) != 1 {
			t.Fatalf("close: %+v", got)
		}
		now := f.clock.Now() // Epoch + 1s: overdue is due, not closed

		want := map[hourglass.State]int64{
			hourglass.StatePendingPayment: 6, hourglass.StatePaid: 1, hourglass.StateShipped: 1,
			hourglass.StateCompleted: 1, hourglass.StateCancelled: 1, hourglass.StateClosed: 2,
		}
		if got := counts(t, now); !maps.Equal(got, want) {
			t.Errorf("OrderCounts(now) = %v, want %v", got, want)
		}
		// A millisecond earlier the overdue order was still pending; ten seconds later two more are due.
		want[hourglass.StatePendingPayment], want[hourglass.StateClosed] = 7, 1
		if got := counts(t, now.Add(-time.Millisecond)); !maps.Equal(got, want) {
			t.Errorf("OrderCounts(now-1ms) = %v, want %v", got, want)
		}
		want[hourglass.StatePendingPayment], want[hourglass.StateClosed] = 4, 4
		if got := counts(t, Epoch.Add(10*time.Second)); !maps.Equal(got, want) {
			t.Errorf("OrderCounts(epoch+10s) = %v, want %v", got, want)
		}

		for _, tc := range []struct {
			name  string
			until time.Time
			limit int
			want  int
		}{
			{"now", now, 0, 1},
			{"before the overdue deadline", now.Add(-time.Millisecond), 0, 0},
			{"next 10s, deadline on the edge included", now.Add(9 * time.Second), 0, 3},
			{"capped", now.Add(time.Hour), 2, 2},
			{"cap above the count", now.Add(time.Hour), 100, 7},
			{"uncapped", now.Add(time.Hour), -1, 7},
			{"uncapped, zero", now.Add(time.Hour), 0, 7},
		} {
			got, err := f.db.CountPendingDue(f.ctx, tc.until, tc.limit)
			if err != nil || got != tc.want {
				t.Errorf("CountPendingDue %s (%v, %d) = %d, %v; want %d", tc.name, tc.until.Sub(now), tc.limit, got, err, tc.want)
			}
		}

		// From Epoch+1s in 10s buckets: (1s,11s] holds 10s,10s,11s; (11s,21s]
		// holds 20s; (31s,41s] holds 35s; 5m is beyond 6 buckets; the overdue
		// one (deadline = from) is in none.
		for _, tc := range []struct {
			from  time.Time
			width time.Duration
			n     int
			want  []int64
		}{
			{now, 10 * time.Second, 6, []int64{3, 1, 0, 1, 0, 0}},
			{now, 10 * time.Second, 1, []int64{3}},
			{Epoch, time.Second, 12, []int64{1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0}},
			{Epoch.Add(10*time.Second - time.Millisecond), time.Millisecond, 2, []int64{2, 0}},
			{now, time.Hour, 1, []int64{6}},
		} {
			got, err := f.db.PendingDeadlineBuckets(f.ctx, tc.from, tc.width, tc.n)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("PendingDeadlineBuckets(%v, %s, %d) = %v, %v; want %v", tc.from.Sub(Epoch), tc.width, tc.n, got, err, tc.want)
			}
		}
		for _, bad := range []struct {
			width time.Duration
			n     int
		}{{0, 5}, {time.Millisecond - 1, 5}, {-time.Second, 5}, {time.Second, 0}, {time.Second, -1}, {time.Second, 10001}} {
			if _, err := f.db.PendingDeadlineBuckets(f.ctx, now, bad.width, bad.n); err == nil {
				t.Errorf("PendingDeadlineBuckets(width %v, n %d): no error", bad.width, bad.n)
			}
		}
		if got, err := f.db.PendingDeadlineBuckets(f.ctx, now, time.Millisecond, 10000); err != nil || len(got) != 10000 {
			t.Errorf("PendingDeadlineBuckets(1ms, 10000) = %d buckets, %v", len(got), err)
		}
	})
}
