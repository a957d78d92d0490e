package hourglasstest

import (
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exercisePartitions covers the Parts filter of the scans a node runs over
// the partitions it owns: PendingDue, OutboxBatch and DueDeliveries keep
// exactly the orders (and their deliveries) whose id falls in the set; nil
// keeps all, an empty set none.
func exercisePartitions(t *testing.T, h StoreHarness) {
	f := setupStoreWith(t, h, StoreOptions{Outbox: true})
	f.product(t, "A", "x", 1000)
	f.webhook(t, "all", hourglass.EventTypeAll)
	var orders []hourglass.Order
	for range 2*hourglass.Partitions + 3 { // every partition, some twice
		orders = append(orders, f.create(t, time.Second, item("A", 1)))
	}
	f.clock.Advance(time.Minute)
	due := func(parts hourglass.Parts) []int64 {
		t.Helper()
		ts, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: f.clock.Now(), Limit: 10000, Parts: parts})
		if err != nil {
			t.Fatalf("PendingDue(parts %v): %v", parts, err)
		}
		return timerIDs(ts)
	}
	outbox := func(parts hourglass.Parts) []int64 {
		t.Helper()
		ts, err := f.db.OutboxBatch(f.ctx, 10000, parts)
		if err != nil {
			t.Fatalf("OutboxBatch(parts %v): %v", parts, err)
		}
		return timerIDs(ts)
	}
	deliveries := func(parts hourglass.Parts) []int64 {
		t.Helper()
		ds, err := f.db.DueDeliveries(f.ctx, hourglass.DueDeliveriesParams{Until: f.clock.Now(), Limit: 10000, Parts: parts})
		if err != nil {
			t.Fatalf("DueDeliveries(parts %v): %v", parts, err)
		}
		var ids []int64
		for _, d := range ds {
			pd, err := f.db.PendingDelivery(f.ctx, d.ID)
			if err != nil {
				t.Fatalf("PendingDelivery(%d): %v", d.ID, err)
			}
			ids = append(ids, pd.OrderID)
		}
		slices.Sort(ids)
		return ids
	}
	want := func(parts hourglass.Parts) []int64 {
		var ids []int64
		for _, o := range orders {
			if parts.Has(o.ID) {
				ids = append(ids, o.ID)
			}
		}
		return ids
	}
	for _, parts := range []hourglass.Parts{nil, {}, {0}, {hourglass.Partitions - 1}, {1, 5, 63}, {0, 2, 4, 6, 8, 10, 12, 14, 16, 31, 32, 33, 62}} {
		w := want(parts)
		if got := due(parts); !slices.Equal(got, w) {
			t.Errorf("PendingDue(parts %v) = orders %v, want %v", parts, got, w)
		}
		if got := outbox(parts); !slices.Equal(got, w) {
			t.Errorf("OutboxBatch(parts %v) = orders %v, want %v", parts, got, w)
		}
		if got := deliveries(parts); !slices.Equal(got, w) {
			t.Errorf("DueDeliveries(parts %v) = deliveries of orders %v, want %v", parts, got, w)
		}
	}
	// Every partition of a full set is every order.
	all := make(hourglass.Parts, hourglass.Partitions)
	for i := range all {
		all[i] = i
	}
	if got := due(all); len(got) != len(orders) {
		t.Errorf("PendingDue(every partition) = %d orders, want %d", len(got), len(orders))
	}
}

// timerIDs returns the order ids of timers, ascending.
func timerIDs(ts []hourglass.DueItem) []int64 {
	ids := make([]int64, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	slices.Sort(ids)
	return ids
}
