package hourglasstest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// exerciseRetention checks hourglass.RetentionStore and
// ClusterStore.PruneNodes: each kind is pruned at its boundary (strictly
// before the time given) and not before, a batch at most limit rows, and
// what still refers to a row keeps it.
func exerciseRetention(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) storeFixture {
		f := setupStore(t, h)
		f.product(t, "A", "x", 100)
		return f
	}

	t.Run("IdempotencyKeys", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		create := func(key string) (hourglass.Order, bool) {
			t.Helper()
			o, created, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{item("A", 1)},
				Timeout: time.Minute, IdempotencyKey: key, RequestHash: []byte("h")})
			if err != nil {
				t.Fatalf("CreateOrder(%s): %v", key, err)
			}
			return o, created
		}
		old1, _ := create("old1")
		create("old2")
		create("old3")
		f.clock.Set(Epoch.Add(24 * time.Hour))
		edge, _ := create("edge")
		f.clock.Set(Epoch.Add(48 * time.Hour))

		before := Epoch.Add(24 * time.Hour) // edge's key is at before: not strictly before
		prune := func(limit, want int) {
			t.Helper()
			if n, err := f.db.PruneIdempotencyKeys(f.ctx, before, limit); err != nil || n != want {
				t.Fatalf("PruneIdempotencyKeys(limit %d) = %d, %v; want %d", limit, n, err, want)
			}
		}
		prune(0, 0)
		prune(2, 2)
		prune(1000, 1)
		prune(1000, 0)
		// A forgotten key creates anew; the one at the boundary still replays.
		if o, created := create("old1"); !created || o.ID == old1.ID {
			t.Errorf("replay of a pruned key = order %d, created %v; want a new order", o.ID, created)
		}
		if o, created := create("edge"); created || o.ID != edge.ID {
			t.Errorf("replay of the kept key = order %d, created %v; want order %d again", o.ID, created, edge.ID)
		}
	})

	t.Run("Timers", func(t *testing.T) {
		t.Parallel()
		f := withTimers(t, setup(t))
		arm := func(key string, delay time.Duration) hourglass.Timer {
			t.Helper()
			tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: key, Delay: delay, Payload: []byte(`{"k":"` + key + `"}`), RequestHash: []byte(key)})
			return tm
		}
		order := f.create(t, time.Minute, item("A", 1)) // its event is an order's: not PruneTimers'
		fired := arm("fired", time.Minute)
		arm("cancelled", time.Hour)
		arm("scheduled", time.Hour)
		f.clock.Set(Epoch.Add(time.Minute))
		if got := f.fire(t, fired.ID); len(got) != 1 {
			t.Fatalf("FireTimers(fired) = %+v", got)
		}
		f.clock.Set(Epoch.Add(2 * time.Minute))
		f.cancel(t, "cancelled")
		// Fired and pinned by a dead letter: the timer goes, its event stays.
		w := f.webhook(t, "timers", hourglass.EventTimerFired)
		pinned := arm("pinned", 0)
		if got := f.fire(t, pinned.ID); len(got) != 1 {
			t.Fatalf("FireTimers(pinned) = %+v", got)
		}
		for _, d := range f.pendingDeliveries(t) {
			if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: "HTTP 500", WebhookID: w.ID, OrderID: d.OrderID}); err != nil || !rec.Recorded {
				t.Fatalf("record dead: %+v, %v", rec, err)
			}
		}
		// The newest timer is kept whatever its age (see PruneTimers).
		top := arm("top", time.Hour)
		f.cancel(t, "top")
		f.clock.Set(Epoch.Add(30 * 24 * time.Hour))

		prune := func(before time.Time, limit, wantTimers, wantEvents int) {
			t.Helper()
			if n, e, err := f.db.PruneTimers(f.ctx, before, limit); err != nil || n != wantTimers || e != wantEvents {
				t.Fatalf("PruneTimers(%s, limit %d) = %d timers, %d events, %v; want %d, %d", before.Sub(Epoch), limit, n, e, err, wantTimers, wantEvents)
			}
		}
		prune(Epoch.Add(time.Minute), 1000, 0, 0) // fired at Epoch+1m: at the boundary, kept
		prune(Epoch.Add(time.Minute+time.Millisecond), 1000, 1, 1)
		if _, err := f.ts.Timer(f.ctx, "fired"); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
			t.Errorf("Timer(fired) after prune: %v; want not_found", err)
		}
		if evs := f.events(t, fired.ID); len(evs) != 0 {
			t.Errorf("fired timer's events after prune: %v", eventTypes(evs))
		}
		prune(Epoch.Add(2*time.Minute), 1000, 0, 0) // cancelled and pinned at Epoch+2m: kept
		prune(Epoch.Add(2*time.Minute+time.Millisecond), 1, 1, 0)
		prune(Epoch.Add(2*time.Minute+time.Millisecond), 1000, 1, 0)
		prune(Epoch.Add(2*time.Minute+time.Millisecond), 1000, 0, 0)
		if evs := f.events(t, pinned.ID); len(evs) != 1 {
			t.Errorf("pinned timer's events after prune: %v; want its timer.fired (a dead letter needs it)", eventTypes(evs))
		}
		if dls, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10}); err != nil || len(dls) != 1 || dls[0].OrderID != pinned.ID {
			t.Errorf("dead letters after prune: %+v, %v; want the pinned timer's", dls, err)
		}
		if evs := f.events(t, order.ID); len(evs) != 1 {
			t.Errorf("order's events after PruneTimers: %v; want its order.created", eventTypes(evs))
		}
		prune(f.clock.Now(), 1000, 0, 0) // the newest (top) stays, and scheduled ones always
		left := timerKeys(f.timers(t, hourglass.TimerFilter{Limit: 100}))
		if want := []string{"scheduled", "top"}; !slices.Equal(left, want) {
			t.Errorf("timers left %v; want %v", left, want)
		}
		// A pruned key is armed anew, with a new id.
		if again, created := f.arm(t, hourglass.ArmTimerParams{Key: "fired", Delay: time.Hour, RequestHash: []byte("x")}); !created || again.ID == fired.ID || again.ID <= top.ID {
			t.Errorf("re-arm of a pruned key = %+v, created %v; want a new timer with an id above %d", again, created, top.ID)
		}
	})

	t.Run("DeadLetters", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		w := f.webhook(t, "all", hourglass.EventTypeAll)
		var orders []hourglass.Order
		for range 5 {
			orders = append(orders, f.create(t, time.Hour, item("A", 1)))
			f.clock.Advance(time.Second) // each delivery due a second after the one before
		}
		for _, d := range f.pendingDeliveries(t) {
			if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: "HTTP 500", WebhookID: w.ID, OrderID: d.OrderID}); err != nil || !rec.Recorded {
				t.Fatalf("record dead: %+v, %v", rec, err)
			}
		}
		trim := func(keep, limit, want int) {
			t.Helper()
			if n, err := f.db.TrimDeadLetters(f.ctx, keep, limit); err != nil || n != want {
				t.Fatalf("TrimDeadLetters(keep %d, limit %d) = %d, %v; want %d", keep, limit, n, err, want)
			}
		}
		trim(5, 1000, 0) // at the max: nothing dropped
		trim(3, 0, 0)
		trim(3, 1, 1)
		trim(3, 1000, 1)
		trim(3, 1000, 0)
		dls, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var left []int64
		for _, dl := range dls {
			left = append(left, dl.OrderID)
		}
		slices.Sort(left)
		if want := ids(orders[2:]); !slices.Equal(left, want) {
			t.Fatalf("dead letters left are of orders %v; want the newest three %v", left, want)
		}
		if c := f.deliveryCounts(t); c != [2]int{0, 3} {
			t.Errorf("DeliveryCounts = %v; want 0 pending, 3 dead", c)
		}
		// The dropped ones' events are no longer pinned.
		if n, err := f.db.PruneEvents(f.ctx, f.clock.Now(), 1000); err != nil || n != 2 {
			t.Errorf("PruneEvents after the trim = %d, %v; want the two dropped dead letters' events", n, err)
		}
	})

	t.Run("Nodes", func(t *testing.T) {
		t.Parallel()
		if h.OpenShared == nil {
			t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
		}
		da, _ := h.OpenShared(t, StoreOptions{})
		cs, ok := da.(hourglass.ClusterStore)
		if !ok {
			t.Skip("store does not implement hourglass.ClusterStore")
		}
		ctx := context.Background()
		// heartbeat returns when it began: the node's last_seen is no
		// earlier (a slow call, under load, ages it less, not more).
		heartbeat := func(id string) time.Time {
			t.Helper()
			began := time.Now()
			if _, err := cs.Heartbeat(ctx, hourglass.Node{ID: id, Addr: "127.0.0.1:1"}); err != nil {
				t.Fatalf("Heartbeat(%s): %v", id, err)
			}
			return began
		}
		// Cluster times are the database server's: a node ages in real time.
		heartbeat("gone")
		testenv.Phase(t, 400*time.Millisecond, `the "gone" node ages past a 200ms TTL`)
		seen := heartbeat("live")
		if n, err := cs.PruneNodes(ctx, time.Hour, 100); err != nil || n != 0 {
			t.Fatalf("PruneNodes(1h) = %d, %v; want 0", n, err)
		}
		if n, err := cs.PruneNodes(ctx, 200*time.Millisecond, 0); err != nil || n != 0 {
			t.Fatalf("PruneNodes(limit 0) = %d, %v; want 0", n, err)
		}
		n, err := cs.PruneNodes(ctx, 200*time.Millisecond, 100)
		quick := time.Since(seen) < 150*time.Millisecond // live was seen within the 200 ms then
		if err != nil || n < 1 || quick && n != 1 {
			t.Fatalf("PruneNodes(200ms) = %d, %v; want the gone node", n, err)
		}
		st, err := cs.ClusterState(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var nodes []string
		for _, nd := range st.Nodes {
			nodes = append(nodes, nd.ID)
		}
		if slices.Contains(nodes, "gone") || quick && !slices.Contains(nodes, "live") {
			t.Errorf("nodes after PruneNodes: %v; want live only", nodes)
		}
	})
}
