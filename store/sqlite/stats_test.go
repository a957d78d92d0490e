package sqlite_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestStats checks the dashboard and alert counts against orders in every
// state, including a pending order past its deadline (shown as closed, and
// counted in the backlog) and deadlines on bucket edges.
func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s := open(t, t.TempDir(), clock)
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	create := func(timeout time.Duration) hourglass.Order {
		t.Helper()
		o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	// Created at Epoch: deadlines at Epoch + timeout.
	for _, d := range []time.Duration{10 * time.Second, 10 * time.Second, 11 * time.Second, 20 * time.Second, 35 * time.Second, 5 * time.Minute} {
		create(d)
	}
	paid := create(time.Minute)
	if _, err := s.PayOrder(ctx, paid.ID, "p1"); err != nil {
		t.Fatal(err)
	}
	shipped := create(time.Minute)
	if _, err := s.PayOrder(ctx, shipped.ID, "p2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TransitionOrder(ctx, shipped.ID, hourglass.ActionShip); err != nil {
		t.Fatal(err)
	}
	cancelled := create(time.Minute)
	if _, err := s.TransitionOrder(ctx, cancelled.ID, hourglass.ActionCancel); err != nil {
		t.Fatal(err)
	}
	create(time.Second) // overdue: due at now, not closed yet
	closed := create(time.Second)
	clock.Advance(time.Second)
	if got, err := s.CloseOrders(ctx, []int64{closed.ID}); err != nil || len(got) != 1 {
		t.Fatalf("close: %v, %v", got, err)
	}
	now := clock.Now() // Epoch + 1s: overdue is due, not closed

	counts, err := s.OrderCounts(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[hourglass.State]int64{
		hourglass.StatePendingPayment: 6, hourglass.StatePaid: 1, hourglass.StateShipped: 1,
		hourglass.StateCompleted: 0, hourglass.StateCancelled: 1, hourglass.StateClosed: 2,
	}
	if !maps.Equal(counts, want) {
		t.Errorf("OrderCounts = %v, want %v", counts, want)
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
		{"uncapped", now.Add(time.Hour), -1, 7},
	} {
		t.Run("CountPendingDue/"+tc.name, func(t *testing.T) {
			got, err := s.CountPendingDue(ctx, tc.until, tc.limit)
			if err != nil || got != tc.want {
				t.Errorf("CountPendingDue(%v, %d) = %d, %v; want %d", tc.until.Sub(now), tc.limit, got, err, tc.want)
			}
		})
	}

	// From Epoch+1s in 10s buckets: (1s,11s] holds 10s,10s,11s; (11s,21s]
	// holds 20s; (31s,41s] holds 35s; 5m is beyond 6 buckets.
	buckets, err := s.PendingDeadlineBuckets(ctx, now, 10*time.Second, 6)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{3, 1, 0, 1, 0, 0}; !slices.Equal(buckets, want) {
		t.Errorf("PendingDeadlineBuckets = %v, want %v", buckets, want)
	}
	for _, bad := range []struct {
		width time.Duration
		n     int
	}{{0, 5}, {time.Second, 0}, {time.Second, 10001}} {
		if _, err := s.PendingDeadlineBuckets(ctx, now, bad.width, bad.n); err == nil {
			t.Errorf("PendingDeadlineBuckets(width %v, n %d): no error", bad.width, bad.n)
		}
	}
}
