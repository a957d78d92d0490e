package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/internal/testenv"
)

func TestClockSkewOf(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	node := func(id, db string, off time.Duration) hourglass.Node {
		return hourglass.Node{ID: id, DBNode: db, ClockOffset: off, OffsetKnown: true}
	}
	for _, tc := range []struct {
		name          string
		nodes         []hourglass.Node
		want          time.Duration
		ahead, behind string
	}{
		{name: "no nodes"},
		{name: "one node", nodes: []hourglass.Node{node("a", "db1", 5*ms)}},
		{
			// PostgreSQL: one server. The nodes' own clocks differ; the
			// server's clock does not differ from itself.
			name:  "one server",
			nodes: []hourglass.Node{node("a", "", 2000*ms), node("b", "", 0), node("c", "", -2000*ms)},
		},
		{
			name:  "three servers within a millisecond",
			nodes: []hourglass.Node{node("a", "db1", 3*ms), node("b", "db2", 3*ms), node("c", "db3", 4*ms)},
			want:  ms, ahead: "c", behind: "a",
		},
		{
			// One Galera node's clock 2 s ahead: its nodes measure 2 s more.
			name: "one server 2s ahead",
			nodes: []hourglass.Node{node("a", "db1", 1*ms), node("b", "db2", 2002*ms), node("c", "db3", 0),
				node("d", "db2", 2001*ms)},
			want: 2002 * ms, ahead: "b", behind: "c",
		},
		{
			name:  "one server 2s behind",
			nodes: []hourglass.Node{node("a", "db1", -2000*ms), node("b", "db2", 0), node("c", "db3", 1*ms)},
			want:  2001 * ms, ahead: "c", behind: "a",
		},
		{
			// A node of an older version, or before its first measurement,
			// publishes none: it is not read as an offset of 0.
			name:  "offset unknown",
			nodes: []hourglass.Node{{ID: "a", DBNode: "db1"}, node("b", "db2", 2000*ms), node("c", "db2", 1990*ms)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := cluster.ClockSkewOf(tc.nodes)
			if got.Skew != tc.want || got.Ahead.ID != tc.ahead || got.Behind.ID != tc.behind {
				t.Errorf("ClockSkewOf = %s (ahead %q, behind %q), want %s (ahead %q, behind %q)",
					got.Skew, got.Ahead.ID, got.Behind.ID, tc.want, tc.ahead, tc.behind)
			}
		})
	}
}

// skews records what a membership reports to a cluster.ClockSkewObserver.
type skews struct{ c chan time.Duration }

func (s skews) Owned(int)                   {}
func (s skews) Takeover()                   {}
func (s skews) Nodes(int)                   {}
func (s skews) DBClockSkew(d time.Duration) { s.c <- d }

// TestMembershipClockSkew runs two memberships whose own clocks differ by
// 300 ms, each on its own store value (on Galera, each on its own database
// node). To the comparison a node whose clock is behind looks like one whose
// database server is ahead (its offset is larger by as much): on Galera the
// skew shows, as the servers' would; on one server (PostgreSQL, MySQL) it is
// 0, since the nodes' own clocks are corrected for and harm nothing. On
// Galera the node whose server is ahead is fenced: it works no partition,
// and the other works all of them.
func TestMembershipClockSkew(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			open := opener(t, kind)
			ctx, cancel := context.WithCancel(context.Background())
			var ms []*cluster.Membership
			var obs []skews
			done := make(chan struct{}, 2)
			for i, off := range []time.Duration{0, -300 * time.Millisecond} {
				db := open()
				o := skews{c: make(chan time.Duration, 1000)}
				m, err := cluster.New(db.(hourglass.ClusterStore), cluster.Config{NodeID: []string{"a", "b"}[i], LeaseTTL: time.Second, Clock: skewed{off}, Observer: o})
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = m.Run(ctx); done <- struct{}{} }()
				ms, obs = append(ms, m), append(obs, o)
			}
			t.Cleanup(func() { cancel(); <-done; <-done })
			// Each tick reports the skew of the nodes seen; wait for a
			// report of both after both published an offset (the second
			// heartbeat of each).
			want := func(d time.Duration) bool {
				if kind == galera {
					return d >= 250*time.Millisecond && d <= 400*time.Millisecond
				}
				return d == 0
			}
			for i, o := range obs {
				timeout := time.After(10 * time.Second)
				var last time.Duration
				for seen := 0; seen < 20 || (kind == galera && !want(last)); seen++ {
					select {
					case last = <-o.c:
					case <-timeout:
						t.Fatalf("node %d: last skew reported %s", i, last)
					}
				}
				if !want(last) {
					t.Errorf("node %d reported a skew of %s", i, last)
				}
			}
			for i, m := range ms {
				s := m.ClockSkew()
				if !want(s.Skew) {
					t.Errorf("node %d: ClockSkew() = %+v", i, s)
				}
				if kind == galera && (s.Ahead.ID != "b" || s.Behind.ID != "a" || s.Ahead.DBNode == s.Behind.DBNode) {
					t.Errorf("node %d: ClockSkew() = %+v, want b's server ahead of a's", i, s)
				}
			}
			// On Galera b's server is ahead by more than MaxClockSkew
			// (100ms): b is fenced and a works every partition. On one
			// server both share them.
			wantB := hourglass.Partitions / 2
			if kind == galera {
				wantB = 0
			}
			testenv.Eventually(t, 10*time.Second, fmt.Sprintf("a owning %d partitions and b %d", hourglass.Partitions-wantB, wantB), func() bool {
				return len(ms[0].Owned()) == hourglass.Partitions-wantB && len(ms[1].Owned()) == wantB
			})

			if got := ms[1].Fenced(); got != (kind == galera) {
				t.Errorf("b.Fenced() = %v on %s", got, kind)
			}
			if ms[0].Fenced() {
				t.Error("a, whose server is behind, is fenced")
			}
			if kind == galera && !ms[0].Leader() {
				t.Error("a is not the leader")
			}
		})
	}
}
