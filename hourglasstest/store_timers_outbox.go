package hourglasstest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimersOutbox covers what an arming writes for other parts of the
// system: the outbox (when the store writes one) and the created feed that
// announces a timer to the other nodes on the database.
func exerciseTimersOutbox(t *testing.T, h StoreHarness) {
	t.Run("Outbox", func(t *testing.T) {
		t.Parallel()
		f := withTimers(t, setupStoreWith(t, h, StoreOptions{Outbox: true}))
		f.product(t, "A", "x", 10)
		o := f.create(t, time.Minute, item("A", 1))
		// outbox returns the timers' entries by id, checking that each id
		// has one and that the order's is still there.
		outbox := func(t *testing.T) []hourglass.DueItem {
			t.Helper()
			batch, err := f.db.OutboxBatch(f.ctx, 1000, nil)
			if err != nil {
				t.Fatalf("OutboxBatch: %v", err)
			}
			var out []hourglass.DueItem
			seen, order := map[int64]bool{}, false
			for _, tm := range batch {
				if seen[tm.ID] {
					t.Fatalf("OutboxBatch = %v: id %d twice", batch, tm.ID)
				}
				seen[tm.ID] = true
				if tm.ID == o.ID {
					order = true
				} else {
					out = append(out, tm)
				}
			}
			if !order {
				t.Fatalf("OutboxBatch = %v: the order's entry %d is gone", batch, o.ID)
			}
			slices.SortFunc(out, func(a, b hourglass.DueItem) int { return cmp.Compare(a.ID, b.ID) })
			return out
		}
		done := func(t *testing.T, published ...hourglass.DueItem) {
			t.Helper()
			if err := f.db.OutboxDone(f.ctx, published); err != nil {
				t.Fatalf("OutboxDone(%v): %v", published, err)
			}
		}
		a, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h1")})
		b, _ := f.arm(t, hourglass.ArmTimerParams{Key: "b", Delay: time.Hour, RequestHash: []byte("h1")})
		entry := func(tm hourglass.Timer) hourglass.DueItem {
			return hourglass.DueItem{ID: tm.ID, At: tm.FireAt}
		}
		if got, want := outbox(t), []hourglass.DueItem{entry(a), entry(b)}; !sameTimers(got, want) {
			t.Fatalf("outbox after arming = %v, want %v", got, want)
		}
		// A re-arm to another time leaves one entry, with the new time.
		f.clock.Advance(time.Second)
		a2, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: 2 * time.Minute, RequestHash: []byte("h2")})
		if got, want := outbox(t), []hourglass.DueItem{entry(a2), entry(b)}; !sameTimers(got, want) {
			t.Fatalf("outbox after a re-arm = %v, want %v", got, want)
		}
		// The relay published a's first time before the re-arm: marking
		// that done leaves the new time to be published.
		done(t, entry(a), entry(b))
		if got, want := outbox(t), []hourglass.DueItem{entry(a2)}; !sameTimers(got, want) {
			t.Fatalf("outbox after OutboxDone of the old time = %v, want the re-arm's %v", got, want)
		}
		done(t, entry(a2))
		if got := outbox(t); len(got) != 0 {
			t.Fatalf("outbox after OutboxDone = %v", got)
		}
		// A repeat that changes nothing writes nothing; a re-arm writes again.
		f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: 2 * time.Minute, RequestHash: []byte("h2")})
		if got := outbox(t); len(got) != 0 {
			t.Fatalf("outbox after a no-op re-arm = %v, want nothing new", got)
		}
		f.clock.Advance(time.Second)
		a3, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: 3 * time.Minute, RequestHash: []byte("h3")})
		if got, want := outbox(t), []hourglass.DueItem{entry(a3)}; !sameTimers(got, want) {
			t.Fatalf("outbox after a re-arm = %v, want %v", got, want)
		}
		done(t, entry(a3))
		// Re-arms of a cancelled or fired timer are written too.
		f.cancel(t, "b")
		f.clock.Set(a3.FireAt)
		f.fire(t, a.ID)
		done(t, entry(a3), entry(b))
		a4, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h4")})
		b2, _ := f.arm(t, hourglass.ArmTimerParams{Key: "b", Delay: time.Minute, RequestHash: []byte("h1")})
		if got, want := outbox(t), []hourglass.DueItem{entry(a4), entry(b2)}; !sameTimers(got, want) {
			t.Fatalf("outbox after re-arming a fired and a cancelled timer = %v, want %v", got, want)
		}
	})

	t.Run("OutboxOffWritesNothing", func(t *testing.T) {
		t.Parallel()
		f := withTimers(t, setupStore(t, h))
		f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h1")})
		f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Hour, RequestHash: []byte("h2")})
		if batch, err := f.db.OutboxBatch(f.ctx, 100, nil); err != nil || len(batch) != 0 {
			t.Fatalf("OutboxBatch without Outbox = %v, %v; want none", batch, err)
		}
	})

	t.Run("AnnouncedToOtherNodes", func(t *testing.T) {
		if h.OpenShared == nil {
			t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
		}
		t.Parallel()
		ctx := context.Background()
		da, dbB := h.OpenShared(t, StoreOptions{}) // the database's own clock
		a, ok := da.(hourglass.ClusterStore)
		if !ok {
			t.Skip("store does not implement hourglass.ClusterStore")
		}
		fb := withTimers(t, storeFixture{ctx: ctx, db: dbB})
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		seen := make(chan hourglass.DueItem, 1000)
		done := make(chan error, 1)
		go func() {
			done <- a.WatchCreated(wctx, func(ts []hourglass.DueItem) {
				for _, t := range ts {
					seen <- t
				}
			})
		}()
		// The watch may take a moment to start; arm until one is seen.
		deadline := time.After(10 * time.Second)
		for i, started := 0, false; !started; i++ {
			fb.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("start-", i), Delay: time.Hour, RequestHash: []byte("h")})
			select {
			case <-seen:
				started = true
			case <-time.After(200 * time.Millisecond):
			case <-deadline:
				t.Fatal("WatchCreated reported no timer armed through the other store value within 10s")
			}
		}
		for len(seen) > 0 {
			<-seen
		}
		// wait waits until every timer of want is reported with its fire
		// time; strict fails on another time for one of them.
		wait := func(want map[int64]time.Time, strict bool) {
			t.Helper()
			for len(want) > 0 {
				select {
				case got := <-seen:
					if d, ok := want[got.ID]; ok {
						if got.At.Equal(d) {
							delete(want, got.ID)
						} else if strict {
							t.Fatalf("timer %d reported with %s, armed to fire at %s", got.ID, got.At, d)
						}
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%d timers armed through the other store value not reported within 10s", len(want))
				}
			}
		}
		want := map[int64]time.Time{}
		var keys []string
		for i := range 20 {
			tm, _ := fb.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("k", i), Delay: time.Hour, RequestHash: []byte("h1")})
			if !hourglass.IsTimerID(tm.ID) {
				t.Fatalf("armed %+v", tm)
			}
			want[tm.ID] = tm.FireAt
			keys = append(keys, tm.Key)
		}
		wait(want, true)
		// A re-arm to another time is announced with it.
		for _, k := range keys[:5] {
			tm, _ := fb.arm(t, hourglass.ArmTimerParams{Key: k, Delay: 2 * time.Hour, RequestHash: []byte("h2")})
			want[tm.ID] = tm.FireAt
		}
		wait(want, false)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("WatchCreated returned %v after its context ended; want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WatchCreated did not return after its context ended")
		}
	})
}
