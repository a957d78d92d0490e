package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// state is a cluster read of the given live nodes and lease owners.
func state(nodes []string, owners ...string) hourglass.ClusterState {
	var st hourglass.ClusterState
	for _, id := range nodes {
		st.Nodes = append(st.Nodes, hourglass.Node{ID: id})
	}
	for i, o := range owners {
		st.Leases = append(st.Leases, hourglass.Lease{Part: i, Owner: o})
	}
	return st
}

func TestQuietNotices(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	const ttl = 4 * time.Second // trusted for 1s
	for _, tc := range []struct {
		name  string
		read  hourglass.ClusterState
		alone bool
	}{
		{"only node, every lease", state([]string{"a"}, "a", "a"), true},
		{"only node, a lease free", state([]string{"a"}, "a", ""), true},
		{"another live node", state([]string{"a", "b"}, "a", "a"), false},
		{"a lease another node holds", state([]string{"a"}, "a", "b"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var q quietNotices
			if q.holds(t0) {
				t.Fatal("holds before any read")
			}
			q.observe(tc.read, ttl, q.mark(), t0)
			if q.holds(t0) {
				t.Fatal("holds before its node's heartbeat named it")
			}
			q.heartbeat("a")
			q.observe(tc.read, ttl, q.mark(), t0)
			if got := q.holds(t0.Add(time.Millisecond)); got != tc.alone {
				t.Fatalf("holds = %v, want %v", got, tc.alone)
			}
		})
	}

	t.Run("a read drops what committed before it, or sends it all", func(t *testing.T) {
		t.Parallel()
		var q quietNotices
		q.heartbeat("a")
		alone := state([]string{"a"}, "a", "a")
		q.observe(alone, ttl, q.mark(), t0)
		if !q.holds(t0) || q.holds(t0.Add(ttl/4)) {
			t.Fatalf("holds at the read %v, a quarter TTL after %v: want true, false", q.holds(t0), q.holds(t0.Add(ttl/4)))
		}
		if late := q.committed([]string{"1"}); late != nil {
			t.Fatalf("committed while alone returned %v to send", late)
		}
		mark := q.mark()
		if late := q.committed([]string{"2"}); late != nil { // commits while the read runs
			t.Fatalf("committed while alone returned %v to send", late)
		}
		if late := q.observe(alone, ttl, mark, t0); late != nil {
			t.Fatalf("a read that found the node alone sent %v", late)
		}
		if !slices.Equal(q.held, []string{"2"}) {
			t.Fatalf("held %v after the read, want [2]: only what committed before it began is dropped", q.held)
		}
		// An older read answering late drops nothing more.
		if late := q.observe(alone, ttl, mark-1, t0); late != nil || len(q.held) != 1 {
			t.Fatalf("an older read: sent %v, held %v", late, q.held)
		}
		q.committed([]string{"3"})
		late := q.observe(state([]string{"a", "b"}, "a", "a"), ttl, q.mark(), t0)
		if !slices.Equal(late, []string{"2", "3"}) || len(q.held) != 0 {
			t.Fatalf("a read that found another node sent %v and held %v, want [2 3] and none", late, q.held)
		}
		if q.holds(t0) {
			t.Fatal("holds after another node appeared")
		}
		// A batch that held while alone and commits after: sent at once.
		if late := q.committed([]string{"4"}); !slices.Equal(late, []string{"4"}) {
			t.Fatalf("committed after the quiet ended returned %v, want [4]", late)
		}
		q.unsent([]string{"4"})
		if late := q.observe(state([]string{"a", "b"}, "a", "b"), ttl, q.mark(), t0); !slices.Equal(late, []string{"4"}) {
			t.Fatalf("the next read sent %v, want the unsent [4]", late)
		}
	})

	t.Run("two nodes through one store value, or leaving: never alone", func(t *testing.T) {
		t.Parallel()
		var q quietNotices
		q.heartbeat("a")
		q.heartbeat("b")
		q.observe(state([]string{"a"}, "a"), ttl, q.mark(), t0)
		if q.holds(t0) {
			t.Fatal("holds with two node ids heartbeating through it")
		}
		var r quietNotices
		r.heartbeat("a")
		r.observe(state([]string{"a"}, "a"), ttl, r.mark(), t0)
		r.committed([]string{"1"})
		if late := r.leave(); !slices.Equal(late, []string{"1"}) || r.holds(t0) {
			t.Fatalf("leave sent %v, holds %v; want [1], false", late, r.holds(t0))
		}
	})
}

// TestWatchCreatedQuietWhileAlone: a node that owns every lease and sees
// no other node holds its announcements; when another node takes a
// partition, its next cluster read sends what was held, late, and later
// creates are announced at their commit again.
func TestWatchCreatedQuietWhileAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, a, b := setupShared(t)
	calls := watch(t, b)
	const ttl = time.Minute // the quiet's answer is trusted for 15s
	if _, err := a.Heartbeat(ctx, hourglass.Node{ID: "a", Addr: "a:1"}); err != nil {
		t.Fatal(err)
	}
	st, err := a.ClusterState(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range st.Leases {
		if _, ok, err := a.AcquireLease(ctx, "a", l, false, ttl); err != nil || !ok {
			t.Fatalf("acquire partition %d: %v, %v", l.Part, ok, err)
		}
	}
	if _, err := a.ClusterState(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	if !a.quiet.holds(realNow()) {
		t.Fatal("a node owning every lease, alone, does not hold its announcements")
	}

	dropped := mustCreateOn(t, a)
	if a.quiet.mark() != 1 {
		t.Fatalf("%d payloads held after a create, want 1", a.quiet.mark())
	}
	if _, err := a.ClusterState(ctx, ttl); err != nil { // still alone: dropped
		t.Fatal(err)
	}
	held := mustCreateOn(t, a)
	if n := len(a.quiet.held); n != 1 {
		t.Fatalf("%d payloads held, want 1", n)
	}

	// b joins and takes a partition; a's next read announces what it held.
	if _, err := b.Heartbeat(ctx, hourglass.Node{ID: "b", Addr: "b:1"}); err != nil {
		t.Fatal(err)
	}
	st, err = b.ClusterState(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.AcquireLease(ctx, "b", st.Leases[0], true, ttl); err != nil || !ok {
		t.Fatalf("steal partition 0: %v, %v", ok, err)
	}
	if _, err := a.ClusterState(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	if a.quiet.holds(realNow()) {
		t.Fatal("a holds its announcements after another node took a partition")
	}
	later := mustCreateOn(t, a)
	want := map[int64]bool{held.ID: true, later.ID: true}
	for len(want) > 0 {
		select {
		case ts := <-calls:
			for _, tm := range ts {
				if tm.ID == dropped.ID {
					t.Fatalf("order %d announced: created while a was alone, before a read that found it alone", tm.ID)
				}
				delete(want, tm.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("orders %v not announced to the node that joined within 10s", want)
		}
	}
}
