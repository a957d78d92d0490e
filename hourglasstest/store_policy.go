package hourglasstest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exercisePolicy covers Policy and PutPolicy and how CreateOrder applies
// them.
func exercisePolicy(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) storeFixture { return setupStore(t, h) }

	t.Run("Default", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p, err := f.db.Policy(f.ctx)
		if err != nil || p.DefaultTimeout != hourglass.DefaultTimeout || len(p.Categories) != 0 {
			t.Fatalf("initial policy %+v, %v; want the default timeout and no categories", p, err)
		}
		f.product(t, "A", "x", 1)
		if o := f.create(t, 0, item("A", 1)); o.Deadline.Sub(o.CreatedAt) != hourglass.DefaultTimeout {
			t.Fatalf("deadline in %s, want hourglass.DefaultTimeout", o.Deadline.Sub(o.CreatedAt))
		}
	})

	t.Run("PutAndTimeouts", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		policy := hourglass.Policy{DefaultTimeout: 20 * time.Minute,
			Categories: map[string]time.Duration{"virtual": 5 * time.Minute, "physical": 30 * time.Minute, "fresh": 90 * time.Second}}
		if err := f.db.PutPolicy(f.ctx, policy); err != nil {
			t.Fatal(err)
		}
		got, err := f.db.Policy(f.ctx)
		if err != nil || got.DefaultTimeout != policy.DefaultTimeout || !maps.Equal(got.Categories, policy.Categories) {
			t.Fatalf("Policy = %+v, %v; want %+v", got, err, policy)
		}
		got.Categories["virtual"] = time.Hour // the caller's copy
		for _, bad := range []hourglass.Policy{
			{DefaultTimeout: time.Millisecond},
			{DefaultTimeout: hourglass.MaxTimeout + time.Millisecond},
			{DefaultTimeout: time.Minute, Categories: map[string]time.Duration{"x": 10 * time.Millisecond}},
			{DefaultTimeout: time.Minute, Categories: map[string]time.Duration{"": time.Minute}},
		} {
			wantCode(t, f.db.PutPolicy(f.ctx, bad), hourglass.CodeInvalidArgument)
		}
		if got, err := f.db.Policy(f.ctx); err != nil || got.DefaultTimeout != policy.DefaultTimeout || !maps.Equal(got.Categories, policy.Categories) {
			t.Fatalf("Policy after refused puts = %+v, %v; want %+v unchanged", got, err, policy)
		}
		f.product(t, "V", "virtual", 10)
		f.product(t, "P", "physical", 10)
		f.product(t, "F", "fresh", 10)
		f.product(t, "N", "books", 10)
		f.product(t, "U", "", 10)
		for _, tt := range []struct {
			items   []hourglass.Item
			timeout time.Duration
			want    time.Duration
		}{
			{[]hourglass.Item{item("P", 1)}, 0, 30 * time.Minute},
			{[]hourglass.Item{item("P", 1), item("V", 1)}, 0, 5 * time.Minute},
			{[]hourglass.Item{item("V", 1), item("P", 1), item("F", 1)}, 0, 90 * time.Second},
			{[]hourglass.Item{item("N", 1)}, 0, 20 * time.Minute},
			{[]hourglass.Item{item("U", 1)}, 0, 20 * time.Minute},
			{[]hourglass.Item{item("N", 1), item("P", 1)}, 0, 30 * time.Minute}, // a matching category beats the default, even when longer
			{[]hourglass.Item{item("V", 1)}, 2 * time.Hour, 2 * time.Hour},      // the request's own overrides
			{[]hourglass.Item{item("P", 1)}, 90 * time.Second, 90 * time.Second},
		} {
			o := f.create(t, tt.timeout, tt.items...)
			if got := o.Deadline.Sub(o.CreatedAt); got != tt.want {
				t.Errorf("items %v timeout %s: deadline in %s, want %s", tt.items, tt.timeout, got, tt.want)
			}
			if !o.CreatedAt.Equal(f.clock.Now()) {
				t.Errorf("created at %v, want the clock's %v", o.CreatedAt, f.clock.Now())
			}
		}
	})

	t.Run("ReplaceAppliesToLaterOrders", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "V", "virtual", 10)
		if err := f.db.PutPolicy(f.ctx, hourglass.Policy{DefaultTimeout: time.Hour, Categories: map[string]time.Duration{"virtual": time.Minute}}); err != nil {
			t.Fatal(err)
		}
		before := f.create(t, 0, item("V", 1))
		// Replaced, not merged: the virtual category is gone.
		if err := f.db.PutPolicy(f.ctx, hourglass.Policy{DefaultTimeout: 2 * time.Hour, Categories: map[string]time.Duration{"other": time.Minute}}); err != nil {
			t.Fatal(err)
		}
		after := f.create(t, 0, item("V", 1))
		if got := after.Deadline.Sub(after.CreatedAt); got != 2*time.Hour {
			t.Fatalf("order after the new policy: deadline in %s, want 2h", got)
		}
		if got := f.order(t, before.ID); !got.Deadline.Equal(Epoch.Add(time.Minute)) {
			t.Fatalf("a new policy moved an earlier order's deadline to %v", got.Deadline)
		}
		p, err := f.db.Policy(f.ctx)
		if err != nil || slices.Collect(maps.Keys(p.Categories))[0] != "other" || len(p.Categories) != 1 {
			t.Fatalf("Policy = %+v, %v; want only category other", p, err)
		}
	})
}

// exerciseOutbox covers OutboxBatch and OutboxDone, with and without
// StoreOptions.Outbox.
func exerciseOutbox(t *testing.T, h StoreHarness) {
	t.Run("WritesEachCreatedTimer", func(t *testing.T) {
		t.Parallel()
		f := setupStoreWith(t, h, StoreOptions{Outbox: true})
		f.product(t, "A", "x", 10)
		var want []hourglass.DueItem
		for i := range 5 {
			// Later orders with earlier deadlines: the batch is by order, not deadline.
			o := f.create(t, time.Duration(10-i)*time.Second, item("A", 1))
			want = append(want, hourglass.DueItem{ID: o.ID, At: o.Deadline})
			f.clock.Advance(time.Millisecond)
		}
		// Refused and repeated creates write no timer.
		_, _, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 6)}})
		wantCode(t, err, hourglass.CodeInsufficientStock)
		params := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)}, Timeout: time.Minute, IdempotencyKey: "k", RequestHash: []byte("h")}
		o, _, err := f.db.CreateOrder(f.ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, hourglass.DueItem{ID: o.ID, At: o.Deadline})
		if _, created, err := f.db.CreateOrder(f.ctx, params); err != nil || created {
			t.Fatalf("repeat: created=%v, %v", created, err)
		}
		batch, err := f.db.OutboxBatch(f.ctx, 100, nil)
		if err != nil || !sameTimers(batch, want) {
			t.Fatalf("OutboxBatch = %v, %v; want %v", batch, err, want)
		}
		batch, err = f.db.OutboxBatch(f.ctx, 2, nil)
		if err != nil || !sameTimers(batch, want[:2]) {
			t.Fatalf("OutboxBatch(2) = %v, %v; want the oldest two %v", batch, err, want[:2])
		}
		// Paying, cancelling or closing does not remove a timer: only OutboxDone does.
		f.pay(t, want[0].ID, "p")
		if err := f.db.OutboxDone(f.ctx, []hourglass.DueItem{want[1], want[3], {ID: 999999, At: want[0].At}}); err != nil {
			t.Fatal(err)
		}
		rest := []hourglass.DueItem{want[0], want[2], want[4], want[5]}
		if batch, err := f.db.OutboxBatch(f.ctx, 100, nil); err != nil || !sameTimers(batch, rest) {
			t.Fatalf("OutboxBatch after done = %v, %v; want %v", batch, err, rest)
		}
		if err := f.db.OutboxDone(f.ctx, []hourglass.DueItem{want[1]}); err != nil { // again: a no-op
			t.Fatal(err)
		}
		if err := f.db.OutboxDone(f.ctx, nil); err != nil {
			t.Fatal(err)
		}
		// An entry whose deadline is not the one published stays.
		stale := rest[0]
		stale.At = stale.At.Add(time.Millisecond)
		if err := f.db.OutboxDone(f.ctx, []hourglass.DueItem{stale}); err != nil {
			t.Fatal(err)
		}
		if batch, err := f.db.OutboxBatch(f.ctx, 100, nil); err != nil || !sameTimers(batch, rest) {
			t.Fatalf("OutboxBatch after done with another deadline = %v, %v; want %v", batch, err, rest)
		}
		if err := f.db.OutboxDone(f.ctx, rest); err != nil {
			t.Fatal(err)
		}
		if batch, err := f.db.OutboxBatch(f.ctx, 100, nil); err != nil || len(batch) != 0 {
			t.Fatalf("OutboxBatch after all done = %v, %v", batch, err)
		}
	})

	t.Run("OffWritesNothing", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 10)
		f.create(t, time.Minute, item("A", 1))
		if batch, err := f.db.OutboxBatch(f.ctx, 100, nil); err != nil || len(batch) != 0 {
			t.Fatalf("OutboxBatch without Outbox = %v, %v; want none", batch, err)
		}
	})
}
