package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/timing/timerloop"
)

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want map[string]int
	}{
		{[]string{"a"}, map[string]int{"a": 64}},
		{[]string{"b", "a"}, map[string]int{"a": 32, "b": 32}},
		{[]string{"c", "a", "b"}, map[string]int{"a": 22, "b": 21, "c": 21}},
		{[]string{"e", "d", "c", "b", "a"}, map[string]int{"a": 13, "b": 13, "c": 13, "d": 13, "e": 12}},
	} {
		var nodes []hourglass.Node
		for _, id := range tc.ids {
			nodes = append(nodes, hourglass.Node{ID: id})
		}
		got := cluster.Shares(nodes)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Shares(%v) = %v, want %v", tc.ids, got, tc.want)
		}
		sum := 0
		for _, n := range got {
			sum += n
		}
		if sum != hourglass.Partitions {
			t.Errorf("Shares(%v) sums to %d", tc.ids, sum)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []cluster.Config{
		{LeaseTTL: time.Millisecond},
		{LeaseTTL: time.Hour},
		{NodeID: "has space"},
		{NodeID: string(make([]byte, 201))},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	if _, err := cluster.New(nil, cluster.Config{LeaseTTL: time.Millisecond}); err == nil {
		t.Error("New with a 1ms TTL: want an error")
	}
}

// galera names the MariaDB Galera cluster in these tests: each store value
// opened on it goes to the next of its three nodes.
const galera = "galera"

// kinds are the shared stores the tests run on.
var kinds = []string{store.KindPostgres, store.KindMySQL, galera}

// opener returns a function that opens store values on one new database of
// kind (on Galera, each on the next node).
func opener(t *testing.T, kind string) func() hourglass.Database {
	t.Helper()
	var urls []string
	switch kind {
	case store.KindPostgres:
		urls = []string{pgtest.NewDatabase(t)}
	case store.KindMySQL:
		urls = []string{mytest.NewDatabase(t)}
	case galera:
		urls = galeratest.NewDatabase(t)
	}
	var mu sync.Mutex
	next := 0
	return func() hourglass.Database {
		mu.Lock()
		url := urls[next%len(urls)]
		next++
		mu.Unlock()
		db, err := store.Open(context.Background(), store.Options{URL: url})
		if err != nil {
			t.Fatalf("open %s: %v", kind, err)
		}
		t.Cleanup(func() { db.Close() })
		if _, ok := db.(hourglass.ClusterStore); !ok {
			t.Skipf("the %s store does not implement hourglass.ClusterStore", kind)
		}
		return db
	}
}

// runNode runs a membership on its own store value until the returned stop
// is called (a clean leave) or its store value is closed (a crash: the
// leases are left to expire).
type runNode struct {
	m      *cluster.Membership
	db     hourglass.Database
	cancel context.CancelFunc
	done   chan struct{}
}

func startNode(t *testing.T, open func() hourglass.Database, id string, ttl time.Duration) *runNode {
	t.Helper()
	db := open()
	m, err := cluster.New(db.(hourglass.ClusterStore), cluster.Config{NodeID: id, Addr: "127.0.0.1:0", LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &runNode{m: m, db: db, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); _ = m.Run(ctx) }()
	t.Cleanup(n.stop)
	return n
}

func (n *runNode) stop() { n.cancel(); <-n.done }

// waitBalanced waits until the live nodes own every partition once, each
// its fair share, as the database says and as each node believes.
func waitBalanced(t *testing.T, nodes []*runNode, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	done := false
	defer func() {
		if !done {
			t.Logf("last view %s", last)
		}
	}()
	testenv.Eventually(t, within, fmt.Sprintf("balanced over %d nodes", len(nodes)), func() bool {
		v, err := nodes[0].m.View(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		last = fmt.Sprintf("%+v", v.Nodes)
		return len(v.Nodes) == len(nodes) && balanced(v, nodes)
	})
	done = true
	return time.Since(start)
}

func balanced(v hourglass.ClusterView, nodes []*runNode) bool {
	seen := map[int]bool{}
	var ns []hourglass.Node
	for _, n := range v.Nodes {
		ns = append(ns, n.Node)
	}
	shares := cluster.Shares(ns)
	for _, n := range v.Nodes {
		if len(n.Partitions) != shares[n.ID] {
			return false
		}
		for _, p := range n.Partitions {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	if len(seen) != hourglass.Partitions {
		return false
	}
	for _, rn := range nodes {
		var want []int
		for _, n := range v.Nodes {
			if n.ID == rn.m.NodeID() {
				want = n.Partitions
			}
		}
		if !slices.Equal([]int(rn.m.Owned()), want) {
			return false
		}
	}
	return true
}

func TestMembership(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			open := opener(t, kind)
			const ttl = 2 * time.Second
			a := startNode(t, open, "a", ttl)
			waitBalanced(t, []*runNode{a}, 10*time.Second)
			if !a.m.Leader() {
				t.Fatal("a alone is not the leader")
			}
			b := startNode(t, open, "b", ttl)
			c := startNode(t, open, "c", ttl)
			waitBalanced(t, []*runNode{a, b, c}, 10*time.Second)

			// A clean leave: the others own everything within a tick or two.
			var mu sync.Mutex
			var gained []int
			b.m.OnChange(func(g, _ []int) { mu.Lock(); gained = append(gained, g...); mu.Unlock() })
			c.stop()
			took := waitBalanced(t, []*runNode{a, b}, 10*time.Second)
			t.Logf("%s: after a leave, balanced again in %s", kind, took)
			if took > time.Second {
				t.Errorf("the partitions of a node that left were taken over in %s, want within 1s", took)
			}
			// OnChange runs after Owned reflects the change, so b may be
			// told just after waitBalanced saw it.
			testenv.Eventually(t, time.Second, "b told of the partitions it gained", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(gained) > 0
			})

			// A crash: b's connection is gone; its leases expire after the
			// TTL and a takes them.
			b.db.Close()
			took = waitBalanced(t, []*runNode{a}, 10*time.Second+ttl)
			t.Logf("%s: after a crash, balanced again in %s (TTL %s)", kind, took, ttl)
			if took > ttl+time.Second {
				t.Errorf("the partitions of a crashed node were taken over in %s, want within the TTL %s + 1s", took, ttl)
			}
			// b's own view: it could not renew for a TTL, so it holds nothing.
			testenv.Eventually(t, 3*ttl, "b, cut off from the database, owning nothing", func() bool { return len(b.m.Owned()) == 0 })

		})
	}
}

// skewed is a node's clock off the database's by a fixed amount.
type skewed struct{ off time.Duration }

func (s skewed) Now() time.Time { return time.Now().Add(s.off) }

// TestNodesWithSkewedClocks runs three in-process nodes (membership, wheel
// and engine each, on their own store value) whose clocks are 2 s ahead,
// right and 2 s behind the database's, and creates orders round-robin
// through them: every order is closed once, none before its deadline (the
// database's clock decides) and none late by the skew (each node corrects
// its schedule by its measured offset).
func TestNodesWithSkewedClocks(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			open := opener(t, kind)
			type node struct {
				db  hourglass.Database
				eng *engine.Engine
				m   *cluster.Membership
			}
			var nodes []node
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			for i, off := range []time.Duration{2 * time.Second, 0, -2 * time.Second} {
				db := open()
				if i == 0 { // cleanups run last first: stop the nodes before their stores close
					t.Cleanup(func() { cancel(); wg.Wait() })
				}
				cs := db.(hourglass.ClusterStore)
				m, err := cluster.New(cs, cluster.Config{NodeID: fmt.Sprintf("n%d", i), LeaseTTL: time.Second, Clock: skewed{off}})
				if err != nil {
					t.Fatal(err)
				}
				joinStart := time.Now()
				if err := m.Join(ctx); err != nil {
					t.Fatal(err)
				}
				// The offset is a lower bound of the true one (-off), short of
				// it by at most the heartbeat's time on the way back (within
				// Join's) and the database clock's millisecond.
				joined := time.Since(joinStart)
				if got := m.Offset(); got > -off+time.Millisecond || got < -off-joined-2*time.Millisecond {
					t.Fatalf("node with a clock %s off measured offset %s; want within [%s, %s] (Join took %s)",
						off, got, -off-joined-2*time.Millisecond, -off+time.Millisecond, joined)
				}
				clock := m.Clock()
				eng, err := engine.New(db, engine.Config{
					Scheduler: timerloop.NewWheel(timerloop.Config{Clock: clock}),
					Clock:     clock,
					Ownership: m,
				})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(2)
				go func() { defer wg.Done(); _ = m.Run(ctx) }()
				go func() { defer wg.Done(); _ = eng.Run(ctx) }()
				nodes = append(nodes, node{db, eng, m})
			}
			if _, err := nodes[0].db.PutProduct(ctx, hourglass.Product{SKU: "S", Name: "s", Category: "x", Available: 100000}); err != nil {
				t.Fatal(err)
			}
			var orders []hourglass.Order
			start := time.Now()
			for i := range 300 {
				testenv.Until(ctx, start.Add(time.Duration(i)*3*time.Millisecond)) // spread over about a second
				n := nodes[i%3]
				o, _, err := n.db.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "S", Quantity: 1}}, Timeout: time.Second + time.Duration(i%20)*100*time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				n.eng.Schedule(hourglass.DueItem{ID: o.ID, At: o.Deadline})
				orders = append(orders, o)
			}
			deadline := time.Now().Add(20 * time.Second)
			for i, o := range orders {
				var got hourglass.Order
				testenv.Eventually(t, time.Until(deadline), fmt.Sprintf("order %d closed 20s after the test began creating", o.ID), func() bool {
					var err error
					if got, err = nodes[0].db.Order(ctx, o.ID); err != nil {
						t.Fatal(err)
					}
					return got.Status == hourglass.StateClosed
				})
				if got.ClosedAt.Before(got.Deadline) {
					t.Fatalf("order %d closed at %s, before its deadline %s", o.ID, got.ClosedAt, got.Deadline)
				}
				// Uncorrected, a node 2 s behind closes 2 s late.
				if late := got.ClosedAt.Sub(got.Deadline); late > 1500*time.Millisecond {
					t.Errorf("order %d (created through node %d) closed %s after its deadline", o.ID, i%3, late)
				}

				evs, err := nodes[0].db.OrderEvents(ctx, o.ID)
				if err != nil {
					t.Fatal(err)
				}
				closes := 0
				for _, e := range evs {
					if e.Type == hourglass.EventOrderClosed {
						closes++
					}
				}
				if closes != 1 {
					t.Fatalf("order %d has %d order.closed events, want 1", o.ID, closes)
				}
			}
		})
	}
}
