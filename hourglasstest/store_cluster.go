package hourglasstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// exerciseCluster covers hourglass.ClusterStore: membership and partition
// leases on the database's clock, with two store values on one database
// (two nodes). Skipped for stores that cannot be shared or do not
// implement it. Leases are timed by the database's own clock, so these
// cases run in real time with short TTLs.
func exerciseCluster(t *testing.T, h StoreHarness) {
	if h.OpenShared == nil {
		t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
	}
	setup := func(t *testing.T) (a, b hourglass.ClusterStore, da, db hourglass.Database) {
		t.Helper()
		da, db = h.OpenShared(t, StoreOptions{})
		ca, ok := da.(hourglass.ClusterStore)
		if !ok {
			t.Skip("store does not implement hourglass.ClusterStore")
		}
		return ca, db.(hourglass.ClusterStore), da, db
	}
	ctx := context.Background()
	state := func(t *testing.T, c hourglass.ClusterStore, ttl time.Duration) hourglass.ClusterState {
		t.Helper()
		s, err := c.ClusterState(ctx, ttl)
		if err != nil {
			t.Fatalf("ClusterState: %v", err)
		}
		if len(s.Leases) != hourglass.Partitions {
			t.Fatalf("ClusterState has %d leases, want %d", len(s.Leases), hourglass.Partitions)
		}
		for i, l := range s.Leases {
			if l.Part != i {
				t.Fatalf("lease %d is of partition %d: want them by partition", i, l.Part)
			}
		}
		return s
	}
	near := func(a, b time.Time, d time.Duration) bool { return a.Sub(b).Abs() <= d }

	t.Run("Membership", func(t *testing.T) {
		t.Parallel()
		a, b, _, _ := setup(t)
		s := state(t, a, time.Minute)
		if len(s.Nodes) != 0 {
			t.Fatalf("a new database has nodes %+v", s.Nodes)
		}
		for _, l := range s.Leases {
			if l.Owner != "" {
				t.Fatalf("a new database has lease %+v: want every partition free", l)
			}
		}
		now1, err := a.Heartbeat(ctx, hourglass.Node{ID: "n1", Addr: "127.0.0.1:1"})
		if err != nil {
			t.Fatalf("Heartbeat(n1): %v", err)
		}
		if !near(now1, time.Now(), 5*time.Second) {
			t.Fatalf("Heartbeat returned the database's now %s; the test's clock says %s", now1, time.Now())
		}
		testenv.Phase(t, 20*time.Millisecond, "the database's clock moves on before n2's first heartbeat")
		if _, err := b.Heartbeat(ctx, hourglass.Node{ID: "n2", Addr: "127.0.0.1:2"}); err != nil {
			t.Fatalf("Heartbeat(n2): %v", err)
		}
		s = state(t, b, time.Minute)
		if len(s.Nodes) != 2 || s.Nodes[0].ID != "n1" || s.Nodes[1].ID != "n2" {
			t.Fatalf("nodes = %+v, want n1 and n2 by id", s.Nodes)
		}
		n1 := s.Nodes[0]
		if n1.Addr != "127.0.0.1:1" || !near(n1.StartedAt, now1, 5*time.Millisecond) || n1.LastSeen.Before(n1.StartedAt) {
			t.Fatalf("n1 = %+v; want addr 127.0.0.1:1 and started at its first heartbeat %s", n1, now1)
		}
		// A later heartbeat renews last_seen and keeps started_at.
		testenv.Phase(t, 30*time.Millisecond, "the database's clock moves on before n1's second heartbeat")
		now2, err := a.Heartbeat(ctx, hourglass.Node{ID: "n1", Addr: "127.0.0.1:1", StartedAt: n1.StartedAt})
		if err != nil {
			t.Fatal(err)
		}
		s = state(t, a, time.Minute)
		if got := s.Nodes[0]; !got.StartedAt.Equal(n1.StartedAt) || !near(got.LastSeen, now2, 5*time.Millisecond) || !got.LastSeen.After(n1.LastSeen) {
			t.Fatalf("after a second heartbeat n1 = %+v; want started_at %s kept and last_seen %s", got, n1.StartedAt, now2)
		}
		// Nodes not seen within the TTL are left out.
		testenv.Phase(t, 250*time.Millisecond, "n1's last heartbeat ages past a 200ms TTL")
		if _, err := b.Heartbeat(ctx, hourglass.Node{ID: "n2", Addr: "127.0.0.1:2"}); err != nil {
			t.Fatal(err)
		}
		s = state(t, a, 200*time.Millisecond)
		if len(s.Nodes) != 1 || s.Nodes[0].ID != "n2" {
			t.Fatalf("nodes seen within 200ms = %+v, want only n2", s.Nodes)
		}
		if err := b.LeaveCluster(ctx, "n2"); err != nil {
			t.Fatalf("LeaveCluster(n2): %v", err)
		}
		s = state(t, a, time.Minute)
		if len(s.Nodes) != 1 || s.Nodes[0].ID != "n1" {
			t.Fatalf("after n2 left, nodes = %+v, want only n1", s.Nodes)
		}
		if err := b.LeaveCluster(ctx, "n2"); err != nil {
			t.Fatalf("LeaveCluster twice: %v (want idempotent)", err)
		}
	})

	t.Run("ClockOffset", func(t *testing.T) {
		t.Parallel()
		a, b, _, _ := setup(t)
		node := func(t *testing.T, id string) hourglass.Node {
			t.Helper()
			for _, n := range state(t, b, time.Minute).Nodes {
				if n.ID == id {
					return n
				}
			}
			t.Fatalf("node %s not in the cluster state", id)
			return hourglass.Node{}
		}
		// Not measured yet (a first heartbeat): no offset.
		if _, err := a.Heartbeat(ctx, hourglass.Node{ID: "n1"}); err != nil {
			t.Fatal(err)
		}
		if n := node(t, "n1"); n.OffsetKnown || n.ClockOffset != 0 {
			t.Fatalf("after a heartbeat without an offset n1 = %+v, want none known", n)
		}
		// Published to the others to the microsecond, negative or positive.
		for _, off := range []time.Duration{-1500*time.Millisecond - 7*time.Microsecond, 2 * time.Second, 0} {
			if _, err := a.Heartbeat(ctx, hourglass.Node{ID: "n1", ClockOffset: off, OffsetKnown: true}); err != nil {
				t.Fatal(err)
			}
			if n := node(t, "n1"); !n.OffsetKnown || n.ClockOffset != off {
				t.Fatalf("after a heartbeat with offset %s n1 = %+v", off, n)
			}
		}
		// The server a heartbeat reached is the same for every heartbeat
		// through one store value.
		first := node(t, "n1").DBNode
		if _, err := a.Heartbeat(ctx, hourglass.Node{ID: "n1"}); err != nil {
			t.Fatal(err)
		}
		if n := node(t, "n1"); n.OffsetKnown || n.DBNode != first {
			t.Fatalf("after a heartbeat without an offset n1 = %+v, want none known and db node %q", n, first)
		}
	})

	t.Run("Leases", func(t *testing.T) {
		t.Parallel()
		a, b, _, _ := setup(t)
		ttl := 10 * time.Second
		free := state(t, a, ttl).Leases[3]
		l1, ok, err := a.AcquireLease(ctx, "n1", free, false, ttl)
		if err != nil || !ok {
			t.Fatalf("AcquireLease(free) = %v, %v", ok, err)
		}
		if l1.Part != 3 || l1.Owner != "n1" || l1.Epoch != free.Epoch+1 {
			t.Fatalf("acquired %+v from %+v; want partition 3, owner n1, epoch +1", l1, free)
		}
		s := state(t, b, ttl)
		if got := s.Leases[3]; got.Owner != "n1" || got.Epoch != l1.Epoch || !near(got.Expires, l1.Expires, time.Millisecond) || !near(got.Expires, s.Now.Add(ttl), time.Second) {
			t.Fatalf("stored lease %+v, acquired %+v; want it to expire a TTL after the database's now %s", got, l1, s.Now)
		}
		// The same stale snapshot cannot win twice, for anyone.
		if _, ok, err := b.AcquireLease(ctx, "n2", free, false, ttl); err != nil || ok {
			t.Fatalf("AcquireLease(stale snapshot) = %v, %v; want false", ok, err)
		}
		// Held and not expired: not free unless stolen.
		if _, ok, err := b.AcquireLease(ctx, "n2", l1, false, ttl); err != nil || ok {
			t.Fatalf("AcquireLease(held, no steal) = %v, %v; want false", ok, err)
		}
		// Renewal extends it.
		testenv.Phase(t, 20*time.Millisecond, "the database's clock moves on before the renewal")
		renewed, err := a.RenewLeases(ctx, "n1", []hourglass.Lease{l1}, ttl)
		if err != nil || len(renewed) != 1 || renewed[0].Epoch != l1.Epoch || !renewed[0].Expires.After(l1.Expires) {
			t.Fatalf("RenewLeases = %+v, %v; want %+v with a later expiry", renewed, err, l1)
		}
		// A rebalance steals it; the old owner's renewal then fails.
		l2, ok, err := b.AcquireLease(ctx, "n2", renewed[0], true, ttl)
		if err != nil || !ok || l2.Owner != "n2" || l2.Epoch != l1.Epoch+1 {
			t.Fatalf("AcquireLease(steal) = %+v, %v, %v; want n2 at epoch %d", l2, ok, err, l1.Epoch+1)
		}
		if got, err := a.RenewLeases(ctx, "n1", renewed, ttl); err != nil || len(got) != 0 {
			t.Fatalf("RenewLeases after the steal = %+v, %v; want none renewed", got, err)
		}
		if got, err := a.RenewLeases(ctx, "n1", []hourglass.Lease{{Part: 3, Owner: "n1", Epoch: l2.Epoch}}, ttl); err != nil || len(got) != 0 {
			t.Fatalf("RenewLeases of another owner's lease = %+v, %v; want none", got, err)
		}
		// Release frees it at once.
		if err := b.ReleaseLeases(ctx, "n2", []int{3}); err != nil {
			t.Fatalf("ReleaseLeases: %v", err)
		}
		released := state(t, a, ttl).Leases[3]
		if released.Owner != "" || released.Epoch != l2.Epoch {
			t.Fatalf("after release the lease is %+v; want no owner, epoch %d kept", released, l2.Epoch)
		}
		if err := a.ReleaseLeases(ctx, "n1", []int{3}); err != nil {
			t.Fatalf("ReleaseLeases of a partition not held: %v", err)
		}
		l3, ok, err := a.AcquireLease(ctx, "n1", released, false, ttl)
		if err != nil || !ok || l3.Epoch != l2.Epoch+1 {
			t.Fatalf("AcquireLease(released) = %+v, %v, %v", l3, ok, err)
		}
		// Leaving releases every lease the node holds.
		more, ok, err := a.AcquireLease(ctx, "n1", state(t, a, ttl).Leases[4], false, ttl)
		if err != nil || !ok {
			t.Fatalf("AcquireLease(4) = %v, %v", ok, err)
		}
		if err := a.LeaveCluster(ctx, "n1"); err != nil {
			t.Fatal(err)
		}
		s = state(t, b, ttl)
		if s.Leases[3].Owner != "" || s.Leases[4].Owner != "" || s.Leases[4].Epoch != more.Epoch {
			t.Fatalf("after n1 left, leases 3 and 4 = %+v, %+v; want both free", s.Leases[3], s.Leases[4])
		}
	})

	t.Run("LeaseExpires", func(t *testing.T) {
		t.Parallel()
		a, b, _, _ := setup(t)
		ttl := 300 * time.Millisecond
		l, ok, err := a.AcquireLease(ctx, "n1", state(t, a, ttl).Leases[7], false, ttl)
		if err != nil || !ok {
			t.Fatalf("AcquireLease = %v, %v", ok, err)
		}
		if _, ok, _ := b.AcquireLease(ctx, "n2", l, false, ttl); ok {
			t.Fatal("a lease was taken before it expired")
		}
		testenv.Phase(t, ttl+100*time.Millisecond, "the lease's TTL passes on the database's clock")
		// Expired: the owner cannot renew it, another node may take it.
		if got, err := a.RenewLeases(ctx, "n1", []hourglass.Lease{l}, ttl); err != nil || len(got) != 0 {
			t.Fatalf("RenewLeases(expired) = %+v, %v; want none", got, err)
		}
		taken, ok, err := b.AcquireLease(ctx, "n2", l, false, time.Minute)
		if err != nil || !ok || taken.Owner != "n2" || taken.Epoch != l.Epoch+1 {
			t.Fatalf("AcquireLease(expired) = %+v, %v, %v", taken, ok, err)
		}
	})

	t.Run("ConcurrentAcquireOneWins", func(t *testing.T) {
		t.Parallel()
		a, b, _, _ := setup(t)
		free := state(t, a, time.Minute).Leases
		var mu sync.Mutex
		won := map[int]string{}
		var wg sync.WaitGroup
		for i, c := range []hourglass.ClusterStore{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, l := range free {
					got, ok, err := c.AcquireLease(ctx, "n"+string(rune('0'+i)), l, false, time.Minute)
					if err != nil {
						t.Errorf("AcquireLease: %v", err)
						return
					}
					if ok {
						mu.Lock()
						if prev, dup := won[got.Part]; dup {
							t.Errorf("partition %d acquired by %s and %s from one snapshot", got.Part, prev, got.Owner)
						}
						won[got.Part] = got.Owner
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if len(won) != hourglass.Partitions {
			t.Fatalf("%d partitions acquired, want every one once", len(won))
		}
		s := state(t, b, time.Minute)
		for _, l := range s.Leases {
			if l.Owner != won[l.Part] {
				t.Fatalf("partition %d stored owner %q, the winner was %q", l.Part, l.Owner, won[l.Part])
			}
		}
	})

	t.Run("WatchCreated", func(t *testing.T) {
		t.Parallel()
		a, _, _, dbB := setup(t)
		fb := storeFixture{ctx: ctx, db: dbB}
		fb.product(t, "W", "x", 1000)
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
		// The watch may take a moment to start; create until one is seen,
		// then check that every later create arrives with its deadline.
		deadline := time.After(10 * time.Second)
		for started := false; !started; {
			fb.create(t, time.Hour, item("W", 1))
			select {
			case <-seen:
				started = true
			case <-time.After(200 * time.Millisecond):
			case <-deadline:
				t.Fatal("WatchCreated reported no order created through the other store value within 10s")
			}
		}
		for len(seen) > 0 {
			<-seen
		}
		want := map[int64]time.Time{}
		for range 50 {
			o := fb.create(t, time.Hour, item("W", 1))
			want[o.ID] = o.Deadline
		}
		for len(want) > 0 {
			select {
			case got := <-seen:
				if d, ok := want[got.ID]; ok {
					if !got.At.Equal(d) {
						t.Fatalf("order %d reported with deadline %s, created with %s", got.ID, got.At, d)
					}
					delete(want, got.ID)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of 50 orders created through the other store value not reported within 10s", len(want))
			}
		}
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
