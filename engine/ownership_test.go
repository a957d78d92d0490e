package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestOwnedPartitionsOnly: an engine with an Ownership loads and accepts
// only the orders of its partitions, loads a gained partition's window at
// once (its overdue orders included), and drops the timers of a lost one
// as they fire instead of closing them.
func TestOwnedPartitionsOnly(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	var orders []hourglass.Order
	for range 6 {
		orders = append(orders, f.create(t, time.Minute))
	}
	part := func(i int) int { return hourglass.PartitionOf(orders[i].ID) }
	own := hourglasstest.NewOwnership(part(0), part(1), part(2))
	e := f.engine(t, Config{Ownership: own})
	if err := e.loader.Load(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.Pending(); got != 3 {
		t.Fatalf("the first load holds %d timers, want the 3 of the owned partitions", got)
	}
	e.Schedule(hourglass.DueItem{ID: orders[3].ID, At: orders[3].Deadline})
	if got := e.Pending(); got != 3 {
		t.Fatalf("Schedule of an order of another partition: %d timers held, want 3", got)
	}

	// Gaining two partitions after their orders fell due: the loader
	// loads them (package window tests that a gain wakes it).
	clock.Advance(2 * time.Minute)
	own.Move([]int{part(3), part(4)}, nil)
	if err := e.loader.LoadGained(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.Pending(); got != 5 {
		t.Fatalf("after the gain: %d timers held, want 5", got)
	}

	// Losing the first partition: its timer is dropped at delivery.
	own.Move(nil, []int{part(0)})
	var due []hourglass.DueItem
	for _, o := range orders[:5] {
		due = append(due, hourglass.DueItem{ID: o.ID, At: o.Deadline})
	}
	if err := e.deliver(f.ctx, due); err != nil {
		t.Fatal(err)
	}
	for i, o := range orders {
		got, err := f.store.Order(f.ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantClosed := i >= 1 && i <= 4
		if (got.Status == hourglass.StateClosed) != wantClosed {
			t.Errorf("order %d (partition %d) is %s; want closed %v", i, part(i), got.Status, wantClosed)
		}
	}

	// A watch that may have missed creates asks for every owned partition
	// again.
	e.follow(hourglass.DueUpdate{Reload: true})
	if got, want := e.parts.TakeGained(), own.Owned(); !slices.Equal(got, want) {
		t.Fatalf("after a reload request the partitions to load are %v, want the owned %v", got, want)
	}
}

// partitionedScheduler records what the engine tells a hourglass.Partitioned
// scheduler.
type partitionedScheduler struct {
	mu    sync.Mutex
	owned []hourglass.Parts
}

func (s *partitionedScheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "partitioned", Feed: hourglass.FeedWindow}
}
func (s *partitionedScheduler) Schedule(context.Context, []hourglass.DueItem) error { return nil }
func (s *partitionedScheduler) Run(ctx context.Context, _ hourglass.Deliver) error {
	<-ctx.Done()
	return nil
}
func (s *partitionedScheduler) Close() error { return nil }
func (s *partitionedScheduler) Own(parts hourglass.Parts) {
	s.mu.Lock()
	s.owned = append(s.owned, parts)
	s.mu.Unlock()
}

// TestPartitionedSchedulerFollowsOwnership: a scheduler shared by the nodes
// (hourglass.Partitioned) is told the partitions owned when the engine is
// made and again after each move, so that it consumes only those; without
// an Ownership it is told nothing (it consumes every partition).
func TestPartitionedSchedulerFollowsOwnership(t *testing.T) {
	t.Parallel()
	f := setup(t, hourglasstest.NewClock(hourglasstest.Epoch))
	s := &partitionedScheduler{}
	own := hourglasstest.NewOwnership(1, 2)
	f.engine(t, Config{Scheduler: s, Ownership: own})
	own.Move([]int{3}, []int{1})
	s.mu.Lock()
	got := slices.Clone(s.owned)
	s.mu.Unlock()
	want := []hourglass.Parts{{1, 2}, {2, 3}}
	if !slices.EqualFunc(got, want, func(a, b hourglass.Parts) bool { return slices.Equal(a, b) }) {
		t.Fatalf("Own calls %v, want %v", got, want)
	}

	alone := &partitionedScheduler{}
	f.engine(t, Config{Scheduler: alone})
	if len(alone.owned) != 0 {
		t.Fatalf("without an Ownership: Own calls %v, want none", alone.owned)
	}
}

// outboxScheduler is a broker as the engine sees it: fed from the outbox,
// and it delivers nothing here.
type outboxScheduler struct{ partitionedScheduler }

func (s *outboxScheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "broker", Feed: hourglass.FeedOutbox, Durable: true}
}

// TestGainedPartitionsSweptAtOnce: with a mechanism fed from the outbox (a
// broker, which may hold a dead node's timers until its own timeout), the
// deadlines that passed in a partition gained are closed as soon as it is
// gained, not after the sweeper's grace and interval; the orders of other
// partitions are left to the mechanism.
func TestGainedPartitionsSweptAtOnce(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	a, b := f.create(t, time.Minute), f.create(t, time.Minute)
	for hourglass.PartitionOf(b.ID) == hourglass.PartitionOf(a.ID) {
		b = f.create(t, time.Minute)
	}
	other := (hourglass.PartitionOf(a.ID) + 1) % hourglass.Partitions
	for other == hourglass.PartitionOf(b.ID) {
		other = (other + 1) % hourglass.Partitions
	}
	own := hourglasstest.NewOwnership(other)
	e := f.engine(t, Config{Scheduler: &outboxScheduler{}, Ownership: own, SweepInterval: time.Hour})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// The start-up recovery sweep is done: it sweeps every partition owned.
	testenv.Eventually(t, 10*time.Second, "the start-up recovery sweep done", e.recovered.Load)
	clock.Advance(2 * time.Minute) // both overdue; the sweeper's interval is an hour away
	own.Move([]int{hourglass.PartitionOf(a.ID)}, nil)
	var status hourglass.State
	closed := false
	defer func() {
		if !closed { // Eventually failed the test: say what the order is
			t.Logf("the overdue order of the partition gained is %s", status)
		}
	}()
	testenv.Eventually(t, 10*time.Second, "the overdue order of the partition gained closed at once", func() bool {
		got, err := f.store.Order(f.ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		status = got.Status
		return got.Status == hourglass.StateClosed
	})
	closed = true
	if got, err := f.store.Order(f.ctx, b.ID); err != nil || got.Status != hourglass.StatePendingPayment {
		t.Fatalf("the order of a partition not gained = %s, %v; want it left pending", got.Status, err)
	}
}

// reclaimingScheduler is a broker that may hold a dead node's timers for
// a minute (hourglass.Reclaiming), and records what it is given.
type reclaimingScheduler struct {
	outboxScheduler
	scheduled chan []hourglass.DueItem
	fails     atomic.Int32 // this many Reclaims fail first (the broker is down)
	failed    atomic.Int32
}

func (s *reclaimingScheduler) ReclaimHorizon() time.Duration { return time.Minute }
func (s *reclaimingScheduler) Reclaim(_ context.Context, ts []hourglass.DueItem) error {
	if s.fails.Add(-1) >= 0 {
		s.failed.Add(1)
		return errors.New("reclaimingScheduler: the broker is down")
	}
	s.scheduled <- ts
	return nil
}

// runUntilCleanup runs e until the test ends.
func runUntilCleanup(t *testing.T, f fixture, e *Engine) {
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// gainAfterStart runs an engine on s that owns one partition other than
// part until the test ends and, once its start-up recovery sweep is done,
// gives it part.
func gainAfterStart(t *testing.T, f fixture, s *reclaimingScheduler, part int) {
	t.Helper()
	own := hourglasstest.NewOwnership((part + 1) % hourglass.Partitions)
	e := f.engine(t, Config{Scheduler: s, Ownership: own, SweepInterval: time.Hour})
	runUntilCleanup(t, f, e)
	testenv.Eventually(t, 10*time.Second, "the start-up recovery sweep done", e.recovered.Load)
	own.Move([]int{part}, nil)
}

// TestGainedPartitionsScheduledAgain: with a mechanism that may hold a dead
// owner's timers (hourglass.Reclaiming), the deadlines of a partition
// gained that fall within its horizon are scheduled again by the new
// owner; later ones and other partitions' are not.
func TestGainedPartitionsScheduledAgain(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	soon := f.create(t, 30*time.Second)
	late := f.create(t, 10*time.Minute)
	for hourglass.PartitionOf(late.ID) != hourglass.PartitionOf(soon.ID) {
		late = f.create(t, 10*time.Minute)
	}
	elsewhere := f.create(t, 30*time.Second)
	for hourglass.PartitionOf(elsewhere.ID) == hourglass.PartitionOf(soon.ID) {
		elsewhere = f.create(t, 30*time.Second)
	}
	s := &reclaimingScheduler{scheduled: make(chan []hourglass.DueItem, 100)}
	gainAfterStart(t, f, s, hourglass.PartitionOf(soon.ID))
	select {
	case got := <-s.scheduled:
		if len(got) != 1 || got[0].ID != soon.ID || !got[0].At.Equal(soon.Deadline) {
			t.Fatalf("scheduled again %v; want only order %d (due in 30 s, within the horizon)", got, soon.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing scheduled again 10 s after the gain")
	}
}

// TestGainedPartitionsReclaimRetried: a Reclaim that fails (the broker is
// down) is tried again at the sweep loop's next tick, until the deadlines
// of the partition gained are scheduled again.
func TestGainedPartitionsReclaimRetried(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	soon := f.create(t, 30*time.Second)
	s := &reclaimingScheduler{scheduled: make(chan []hourglass.DueItem, 100)}
	s.fails.Store(2)
	gainAfterStart(t, f, s, hourglass.PartitionOf(soon.ID))
	testenv.Eventually(t, 10*time.Second, "the first Reclaim failed", func() bool { return s.failed.Load() == 1 })
	for range 100 { // each tick of the sweep loop (DegradedSweepInterval) tries again
		clock.Advance(DegradedSweepInterval)
		select {
		case got := <-s.scheduled:
			if s.failed.Load() != 2 || len(got) != 1 || got[0].ID != soon.ID {
				t.Fatalf("scheduled again %v after %d failed Reclaims; want order %d after 2", got, s.failed.Load(), soon.ID)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("order %d not scheduled again after %d failed Reclaims and 100 ticks", soon.ID, s.failed.Load())
}

// TestAloneReclaimsAtStart: a node alone (no Ownership) on a mechanism that
// may hold a dead process's timers (hourglass.Reclaiming) schedules again,
// at start, the deadlines within its horizon: its own previous process,
// SIGKILLed, may hold them unacknowledged (a NATS consumer's come back
// only after the 30 s ack wait). Later deadlines are left to the broker.
func TestAloneReclaimsAtStart(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	soon := f.create(t, 30*time.Second)
	f.create(t, 10*time.Minute)
	s := &reclaimingScheduler{scheduled: make(chan []hourglass.DueItem, 100)}
	s.fails.Store(1) // the broker is down at first: the start-up recovery retries
	e := f.engine(t, Config{Scheduler: s, SweepInterval: time.Hour})
	runUntilCleanup(t, f, e)
	timeout := time.After(20 * time.Second)
	for {
		select {
		case got := <-s.scheduled:
			if len(got) != 1 || got[0].ID != soon.ID || !got[0].At.Equal(soon.Deadline) {
				t.Fatalf("scheduled again %v; want only order %d (due in 30 s, within the horizon)", got, soon.ID)
			}
			testenv.Eventually(t, 10*time.Second, "the start-up recovery done", e.Recovered)
			return
		case <-timeout:
			t.Fatalf("nothing scheduled again 20 s after the start (%d Reclaims failed)", s.failed.Load())
		case <-time.After(10 * time.Millisecond):
			clock.Advance(time.Second) // the recovery's retry backoff
		}
	}
}
