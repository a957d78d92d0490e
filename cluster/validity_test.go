package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// hangingStore is a ClusterStore in memory, timed by a fake clock, whose
// renewals can be made to hang until their context ends (a connection that
// stops forwarding). Methods the membership does not call are left to the
// embedded nil interface.
type hangingStore struct {
	hourglass.ClusterStore
	clock *hourglasstest.Clock

	mu      sync.Mutex
	hang    bool
	leases  [hourglass.Partitions]hourglass.Lease
	hanging chan time.Duration // each hung renewal's deadline, from when it was called
}

func newHangingStore(clock *hourglasstest.Clock) *hangingStore {
	s := &hangingStore{clock: clock, hanging: make(chan time.Duration, 100)}
	for p := range s.leases {
		s.leases[p].Part = p
	}
	return s
}

func (s *hangingStore) Heartbeat(context.Context, hourglass.Node) (time.Time, error) {
	return s.clock.Now(), nil
}

func (s *hangingStore) ClusterState(context.Context, time.Duration) (hourglass.ClusterState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return hourglass.ClusterState{Now: s.clock.Now(), Leases: append([]hourglass.Lease(nil), s.leases[:]...)}, nil
}

func (s *hangingStore) AcquireLease(_ context.Context, owner string, prev hourglass.Lease, _ bool, ttl time.Duration) (hourglass.Lease, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[prev.Part] != prev {
		return hourglass.Lease{}, false, nil
	}
	l := hourglass.Lease{Part: prev.Part, Owner: owner, Epoch: prev.Epoch + 1, Expires: s.clock.Now().Add(ttl)}
	s.leases[prev.Part] = l
	return l, true, nil
}

func (s *hangingStore) RenewLeases(ctx context.Context, owner string, held []hourglass.Lease, ttl time.Duration) ([]hourglass.Lease, error) {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang {
		d, _ := ctx.Deadline()
		s.hanging <- time.Until(d)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []hourglass.Lease
	for _, l := range held {
		if cur := s.leases[l.Part]; cur.Owner == owner && cur.Epoch == l.Epoch {
			cur.Expires = s.clock.Now().Add(ttl)
			s.leases[l.Part] = cur
			out = append(out, cur)
		}
	}
	return out, nil
}

func (s *hangingStore) LeaveCluster(context.Context, string) error { return nil }

// TestLeaseValidityByOwnClock drives the membership's clock by hand: while
// its renewals hang (each with a deadline of at most CallTimeout), the node
// works its partitions until LeaseTTL - SafetyMargin after the last renewal
// that succeeded was sent, by its own clock, and not a moment longer:
// Owned and Leader answer none at once, and the watchers are told. Before
// leases held by time, a hung renewal kept them for as long as it hung.
func TestLeaseValidityByOwnClock(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	clock := hourglasstest.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	st := newHangingStore(clock)
	m, err := cluster.New(st, cluster.Config{NodeID: "a", LeaseTTL: ttl, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan []int, 10)
	m.OnChange(func(_, l []int) {
		if len(l) > 0 {
			lost <- l
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 5*time.Second, "a owns every partition", func() bool { return len(m.Owned()) == hourglass.Partitions })
	// A successful renewal at the clock's now: valid until now + TTL - margin.
	testenv.Eventually(t, 5*time.Second, "a renewal at the clock's now", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.leases[0].Expires.Equal(clock.Now().Add(ttl))
	})
	lastRenewal := clock.Now()

	st.mu.Lock()
	st.hang = true
	st.mu.Unlock()
	// The next tick renews: once the loop sleeps on its ticker (and the
	// revocation timer is armed), move the clock a tick on.
	bctx, cancelBlock := context.WithTimeout(ctx, 5*time.Second)
	defer cancelBlock()
	if err := clock.BlockUntil(bctx, 2); err != nil {
		t.Fatal(err)
	}
	clock.Advance(min(ttl/10, cluster.TickMax))
	select {
	case d := <-st.hanging:
		if d > cluster.CallTimeout(ttl) {
			t.Errorf("a renewal's deadline is %s away, want at most CallTimeout %s", d, cluster.CallTimeout(ttl))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal was sent")
	}

	valid := lastRenewal.Add(ttl - cluster.SafetyMargin(ttl))
	clock.Set(valid.Add(-time.Millisecond))
	if got := len(m.Owned()); got != hourglass.Partitions || !m.Leader() {
		t.Fatalf("1ms before the validity ends: owns %d partitions, leader %v; want all, true", got, m.Leader())
	}
	clock.Set(valid)
	if got := m.Owned(); len(got) != 0 || m.Leader() {
		t.Fatalf("at the validity's end: owns %v, leader %v; want none, false", got, m.Leader())
	}
	select {
	case l := <-lost:
		if len(l) != hourglass.Partitions {
			t.Errorf("watchers were told %d partitions lost, want %d", len(l), hourglass.Partitions)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the watchers were not told the partitions were lost")
	}
}

// slowStore is a hangingStore whose every call takes latency by its fake
// clock: the database acts halfway through the call.
type slowStore struct {
	*hangingStore
	latency time.Duration
}

func (s *slowStore) call() func() {
	s.clock.Advance(s.latency / 2)
	return func() { s.clock.Advance(s.latency - s.latency/2) }
}

func (s *slowStore) Heartbeat(ctx context.Context, n hourglass.Node) (time.Time, error) {
	defer s.call()()
	return s.hangingStore.Heartbeat(ctx, n)
}

func (s *slowStore) ClusterState(ctx context.Context, d time.Duration) (hourglass.ClusterState, error) {
	defer s.call()()
	return s.hangingStore.ClusterState(ctx, d)
}

func (s *slowStore) AcquireLease(ctx context.Context, owner string, prev hourglass.Lease, steal bool, ttl time.Duration) (hourglass.Lease, bool, error) {
	defer s.call()()
	return s.hangingStore.AcquireLease(ctx, owner, prev, steal, ttl)
}

func (s *slowStore) RenewLeases(ctx context.Context, owner string, held []hourglass.Lease, ttl time.Duration) ([]hourglass.Lease, error) {
	defer s.call()()
	return s.hangingStore.RenewLeases(ctx, owner, held, ttl)
}

// TestSlowDatabaseKeepsLeases: every call to the database takes a tenth of
// the TTL (a loaded Galera node). A node taking its 64 partitions one call
// each must not let the ones it holds lapse while it takes the rest: it
// takes them over several steps, renewing in between, and never gives one
// up. Taking the whole share in one step, it held each partition for less
// than a TTL out of every few, and orders closed 15 s late.
func TestSlowDatabaseKeepsLeases(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	clock := hourglasstest.NewClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	st := &slowStore{hangingStore: newHangingStore(clock), latency: ttl / 10}
	m, err := cluster.New(st, cluster.Config{NodeID: "a", LeaseTTL: ttl, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		lost []int
	)
	m.OnChange(func(_, l []int) {
		mu.Lock()
		lost = append(lost, l...)
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Each step's calls move the clock past the next tick, so the loop runs
	// on its own; 60 s of the fake clock is hundreds of calls.
	testenv.Eventually(t, 10*time.Second, "a owns every partition", func() bool { return len(m.Owned()) == hourglass.Partitions })
	start := clock.Now()
	testenv.Eventually(t, 10*time.Second, "another 5 s (by the fake clock) of renewals", func() bool { return clock.Now().Sub(start) > 5*time.Second })
	mu.Lock()
	defer mu.Unlock()
	if len(lost) > 0 {
		t.Errorf("the node gave up %d partitions it held (%v); want none while every call returns within a tenth of the TTL", len(lost), lost)
	}
	if got := len(m.Owned()); got != hourglass.Partitions {
		t.Errorf("owns %d partitions after 5 s more; want all %d", got, hourglass.Partitions)
	}
}
