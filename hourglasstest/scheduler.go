package hourglasstest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// SchedulerHarness tells ExerciseScheduler how to make schedulers.
type SchedulerHarness struct {
	// New returns a scheduler bound to namespace ns (its key prefix, queue
	// or stream names). Calls with the same ns share the mechanism's durable
	// state, like two processes pointed at one broker. The harness closes
	// the scheduler in t.Cleanup.
	New func(t *testing.T, ns string) hourglass.Scheduler
	// MaxLateness is the latest a delivery may be after its deadline in the
	// suite's light load (default 3 s: Kafka's was seen 2.35 s late under
	// -race beside the default tier's store suites); measured lateness is
	// logged. It tells late from lost, not fast from slow: the benchmarks
	// measure lateness.
	MaxLateness time.Duration
	// Redelivery is how long an unacknowledged delivery may take to come
	// back after its consumer died (a visibility timeout, a broker's
	// redelivery delay); default 10 s.
	Redelivery time.Duration
}

// ExerciseScheduler runs the conformance suite every delay mechanism must
// pass: each timer fires, never before its deadline, once; cancel (where
// supported); 10,000 timers due in the same millisecond; Destroy (where a
// mechanism keeps objects per namespace) forgets them; a failed delivery
// is delivered again; and, for durable mechanisms, a consumer killed
// mid-batch loses nothing and two consumers at once never double an effect.
func ExerciseScheduler(t *testing.T, h SchedulerHarness) {
	testenv.RequireDefault(t)
	if h.MaxLateness == 0 {
		h.MaxLateness = 3 * time.Second
	}
	if h.Redelivery == 0 {
		h.Redelivery = 10 * time.Second
	}

	t.Run("FiresOnceNeverEarly", func(t *testing.T) {
		s := h.New(t, Namespace(t))
		rec := newRecorder()
		stop := runScheduler(t, s, rec.deliver)
		defer stop()
		timers := makeTimers(1, 300, time.Now().Add(500*time.Millisecond), 3*time.Millisecond)
		schedule(t, s, timers, 50)
		rec.waitAll(t, timers, 1, 5*time.Second+h.MaxLateness)
		stop()
		rec.check(t, timers, h.MaxLateness, true)
	})

	t.Run("Cancel", func(t *testing.T) {
		s := h.New(t, Namespace(t))
		c, ok := s.(hourglass.Canceler)
		if !ok {
			t.Skipf("%s cannot cancel a timer: a paid order's timer still fires, into a no-op close (or, for a mechanism that reads the database, the order is simply no longer pending)", s.Info().Name)
		}
		rec := newRecorder()
		stop := runScheduler(t, s, rec.deliver)
		defer stop()
		base := time.Now().Add(400 * time.Millisecond)
		keep := hourglass.DueItem{ID: 1, At: base.Add(200 * time.Millisecond).Truncate(time.Millisecond)}
		drop := hourglass.DueItem{ID: 2, At: base.Truncate(time.Millisecond)}
		schedule(t, s, []hourglass.DueItem{keep, drop}, 10)
		if err := c.Cancel(context.Background(), []int64{drop.ID}); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		rec.waitAll(t, []hourglass.DueItem{keep}, 1, 5*time.Second+h.MaxLateness)
		// No signal says a cancelled timer will not fire: give it the time
		// one that still fired would have needed to show.
		testenv.Phase(t, 300*time.Millisecond, "room for the cancelled timer to fire, if Cancel missed it")
		stop()
		if n := rec.count(drop.ID); n != 0 {
			t.Fatalf("cancelled timer fired %d times", n)
		}
	})

	t.Run("SameMillisecond10k", func(t *testing.T) {
		s := h.New(t, Namespace(t))
		rec := newRecorder()
		stop := runScheduler(t, s, rec.deliver)
		defer stop()
		timers := makeTimers(1, 10000, time.Now().Add(1500*time.Millisecond), 0)
		schedule(t, s, timers, 1000)
		rec.waitAll(t, timers, 1, 30*time.Second)
		stop()
		rec.check(t, timers, 0, false)
	})

	t.Run("DestroyForgetsTheNamespace", func(t *testing.T) {
		ns := Namespace(t)
		s := h.New(t, ns)
		d, ok := s.(interface{ Destroy(context.Context) error })
		if !ok {
			t.Skipf("%s keeps nothing of its own per namespace on a broker (delay.Destroyer)", s.Info().Name)
		}
		due := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
		gone := makeTimers(1, 100, due, 0)
		schedule(t, s, gone, 100)
		if err := d.Destroy(t.Context()); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		// The namespace afresh, as another process would open it: a timer
		// scheduled now fires (durable mechanisms hand a namespace's timers
		// to any consumer of it: see RedeliversAfterKill), and none of the
		// destroyed ones, all due before it, does.
		again := h.New(t, ns)
		rec := newRecorder()
		stop := runScheduler(t, again, rec.deliver)
		defer stop()
		kept := []hourglass.DueItem{{ID: 1000, At: due.Add(200 * time.Millisecond)}}
		schedule(t, again, kept, 1)
		rec.waitAll(t, kept, 1, 5*time.Second+h.MaxLateness)
		testenv.Phase(t, 300*time.Millisecond, "room for a destroyed timer to fire, if Destroy missed it")
		stop()
		for _, tm := range gone {
			if n := rec.count(tm.ID); n != 0 {
				t.Fatalf("timer %d, scheduled before Destroy, fired %d times after it", tm.ID, n)
			}
		}
	})

	t.Run("RedeliversAfterFailedDelivery", func(t *testing.T) {
		s := h.New(t, Namespace(t))
		rec := newRecorder()
		var failed atomic.Bool
		stop := runScheduler(t, s, func(ctx context.Context, due []hourglass.DueItem) error {
			if failed.CompareAndSwap(false, true) {
				return fmt.Errorf("the database is down (simulated)")
			}
			return rec.deliver(ctx, due)
		})
		defer stop()
		timers := makeTimers(1, 20, time.Now().Add(300*time.Millisecond), 5*time.Millisecond)
		schedule(t, s, timers, 20)
		rec.waitAll(t, timers, 1, h.Redelivery+5*time.Second)
		stop()
		rec.check(t, timers, 0, false)
	})

	t.Run("ConsumerKilledMidBatchLosesNothing", func(t *testing.T) {
		ns := Namespace(t)
		first := h.New(t, ns)
		if !first.Info().Durable {
			t.Skipf("%s keeps timers in memory: the engine reloads them from the database after a crash", first.Info().Name)
		}
		timers := makeTimers(1, 200, time.Now().Add(300*time.Millisecond), 2*time.Millisecond)
		schedule(t, first, timers, 50)
		// The first consumer takes a batch and dies before acknowledging it.
		got := make(chan struct{})
		var once sync.Once
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- first.Run(ctx, func(ctx context.Context, due []hourglass.DueItem) error {
				once.Do(func() { close(got) })
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the first consumer received nothing")
		}
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
		if err := first.Close(); err != nil {
			t.Logf("close first: %v", err)
		}
		second := h.New(t, ns)
		rec := newRecorder()
		stop := runScheduler(t, second, rec.deliver)
		defer stop()
		rec.waitAll(t, timers, 1, h.Redelivery+10*time.Second)
		stop()
		rec.check(t, timers, 0, false)
	})

	t.Run("TwoConsumersNoDoubleEffect", func(t *testing.T) {
		ns := Namespace(t)
		a := h.New(t, ns)
		if !a.Info().Durable {
			t.Skipf("%s keeps timers in memory, one per process", a.Info().Name)
		}
		b := h.New(t, ns)
		// The effect is a compare-and-set, as the store's close is: only
		// the first delivery of an order has an effect.
		rec := newRecorder()
		var effects sync.Map
		var doubled atomic.Int64
		deliver := func(ctx context.Context, due []hourglass.DueItem) error {
			for _, tm := range due {
				if _, loaded := effects.LoadOrStore(tm.ID, true); loaded {
					doubled.Add(1)
				}
			}
			return rec.deliver(ctx, due)
		}
		stopA := runScheduler(t, a, deliver)
		defer stopA()
		stopB := runScheduler(t, b, deliver)
		defer stopB()
		timers := makeTimers(1, 500, time.Now().Add(500*time.Millisecond), time.Millisecond)
		schedule(t, a, timers, 100)
		rec.waitAll(t, timers, 1, 10*time.Second+h.MaxLateness)
		stopA()
		stopB()
		rec.check(t, timers, 0, false)
		n := 0
		effects.Range(func(any, any) bool { n++; return true })
		if n != len(timers) {
			t.Fatalf("%d effects, want %d", n, len(timers))
		}
		t.Logf("deliveries absorbed by the compare-and-set (duplicates across consumers): %d", doubled.Load())
	})

	t.Run("OwnersShareThePartitions", func(t *testing.T) {
		exerciseOwners(t, h)
	})
}

// exerciseOwners: two schedulers on one namespace, as two nodes, each
// owning half the partitions (hourglass.Partitioned). 400 timers over every
// partition, scheduled through both: each is delivered once, to its
// partition's owner, none dropped. Then a quarter of the partitions moves
// from one to the other while 400 more timers wait (some already fetched
// by their old owner): each of those is delivered once, to its new owner.
func exerciseOwners(t *testing.T, h SchedulerHarness) {
	ns := Namespace(t)
	a, b := h.New(t, ns), h.New(t, ns)
	pa, ok := a.(hourglass.Partitioned)
	if !ok {
		t.Skipf("%s is not hourglass.Partitioned: a mechanism in this process is fed only its own partitions by the engine; a broker shared by the nodes must be Partitioned", a.Info().Name)
	}
	pb := b.(hourglass.Partitioned)
	var even, odd, move, keep hourglass.Parts
	for p := range hourglass.Partitions {
		if p%2 == 0 {
			even = append(even, p)
			if p < hourglass.Partitions/2 {
				move = append(move, p)
			} else {
				keep = append(keep, p)
			}
		} else {
			odd = append(odd, p)
		}
	}
	// Each node's deliver checks, as the engine does, that it owns the
	// timer's partition at delivery; the engine would drop one it does
	// not, so here it is a failure.
	owners := []struct {
		name  string
		s     hourglass.Partitioned
		owned atomic.Pointer[hourglass.Parts]
	}{{name: "a", s: pa}, {name: "b", s: pb}}
	setOwned := func(i int, parts hourglass.Parts) {
		owners[i].owned.Store(&parts)
		owners[i].s.Own(parts)
	}
	setOwned(0, even)
	setOwned(1, odd)
	rec := newRecorder()
	var mu sync.Mutex
	var misdelivered []string
	deliverAs := func(i int) hourglass.Deliver {
		return func(ctx context.Context, due []hourglass.DueItem) error {
			owned := *owners[i].owned.Load()
			var mine []hourglass.DueItem
			for _, tm := range due {
				if owned.Has(tm.ID) {
					mine = append(mine, tm)
					continue
				}
				mu.Lock()
				misdelivered = append(misdelivered, fmt.Sprintf("order %d (partition %d) delivered to %s, which does not own it", tm.ID, hourglass.PartitionOf(tm.ID), owners[i].name))
				mu.Unlock()
			}
			return rec.deliver(ctx, mine)
		}
	}
	stopA := runScheduler(t, a, deliverAs(0))
	defer stopA()
	stopB := runScheduler(t, b, deliverAs(1))
	defer stopB()
	checkOwners := func(phase string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, m := range misdelivered[:min(len(misdelivered), 10)] {
			t.Errorf("%s: %s", phase, m)
		}
		if len(misdelivered) > 10 {
			t.Errorf("%s: and %d more timers delivered to a node that does not own them", phase, len(misdelivered)-10)
		}
	}

	first := makeTimers(1, 400, time.Now().Add(500*time.Millisecond), 2*time.Millisecond)
	schedule(t, a, first[:200], 50)
	schedule(t, b, first[200:], 50)
	rec.waitAll(t, first, 1, 5*time.Second+h.MaxLateness)
	checkOwners("steady")
	rec.check(t, first, h.MaxLateness, true)

	// The second batch is scheduled before the move and falls due after
	// it: the old owner may already hold some of them.
	second := makeTimers(1001, 400, time.Now().Add(1500*time.Millisecond), 2*time.Millisecond)
	schedule(t, a, second[:200], 50)
	schedule(t, b, second[200:], 50)
	testenv.Phase(t, 200*time.Millisecond, "the consumers fetch the second batch before the move")
	setOwned(0, keep)
	setOwned(1, append(slices.Clone(odd), move...))
	rec.waitAll(t, second, 1, 5*time.Second+h.MaxLateness+h.Redelivery)
	stopA()
	stopB()
	checkOwners("after the move")
	rec.check(t, second, 0, true)
}

var nsUnsafe = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// Namespace returns a name unique to this test and run, usable as a key
// prefix, queue or stream name: letters, digits and dashes only.
func Namespace(t *testing.T) string {
	name := nsUnsafe.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("hgt-%s-%d", name, time.Now().UnixNano()%1e10)
}

// makeTimers returns n timers with ids from firstID, the first due at start
// and each next one step later, at millisecond precision.
func makeTimers(firstID int64, n int, start time.Time, step time.Duration) []hourglass.DueItem {
	out := make([]hourglass.DueItem, n)
	for i := range out {
		out[i] = hourglass.DueItem{ID: firstID + int64(i), At: start.Add(time.Duration(i) * step).Truncate(time.Millisecond)}
	}
	return out
}

func schedule(t *testing.T, s hourglass.Scheduler, timers []hourglass.DueItem, batch int) {
	t.Helper()
	for i := 0; i < len(timers); i += batch {
		if err := s.Schedule(context.Background(), timers[i:min(i+batch, len(timers))]); err != nil {
			t.Fatalf("Schedule: %v", err)
		}
	}
}

// runScheduler runs s until the returned stop is called (idempotent).
func runScheduler(t *testing.T, s hourglass.Scheduler, deliver hourglass.Deliver) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v after its context ended; want nil", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

type recorder struct {
	mu    sync.Mutex
	first map[int64]time.Time
	n     map[int64]int
	dead  map[int64]time.Time
	early []string
}

func newRecorder() *recorder {
	return &recorder{first: map[int64]time.Time{}, n: map[int64]int{}, dead: map[int64]time.Time{}}
}

func (r *recorder) deliver(_ context.Context, due []hourglass.DueItem) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tm := range due {
		if now.Before(tm.At) {
			r.early = append(r.early, fmt.Sprintf("order %d delivered %s before its deadline", tm.ID, tm.At.Sub(now)))
		}
		if _, ok := r.first[tm.ID]; !ok {
			r.first[tm.ID] = now
			r.dead[tm.ID] = tm.At
		}
		r.n[tm.ID]++
	}
	return nil
}

func (r *recorder) count(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// waitAll waits until every timer was delivered at least min times.
func (r *recorder) waitAll(t *testing.T, timers []hourglass.DueItem, atLeast int, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("each of %d timers delivered %d times", len(timers), atLeast), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, tm := range timers {
			if r.n[tm.ID] < atLeast {
				return false
			}
		}
		return true
	})
}

// check asserts no early delivery, the delivered deadlines, lateness within
// maxLate (0: unchecked) and, if once, no duplicates; it logs percentiles.
func (r *recorder) check(t *testing.T, timers []hourglass.DueItem, maxLate time.Duration, once bool) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.early {
		t.Error(e)
	}
	var late []time.Duration
	dups := 0
	for _, tm := range timers {
		if got := r.dead[tm.ID]; !got.Equal(tm.At) {
			t.Errorf("order %d delivered with deadline %v, scheduled %v", tm.ID, got, tm.At)
		}
		l := r.first[tm.ID].Sub(tm.At)
		late = append(late, l)
		if maxLate > 0 && l > maxLate {
			t.Errorf("order %d delivered %s late (limit %s)", tm.ID, l, maxLate)
		}
		dups += r.n[tm.ID] - 1
	}
	if once && dups > 0 {
		t.Errorf("%d duplicate deliveries in a run without failures", dups)
	}
	slices.Sort(late)
	pct := func(p float64) time.Duration { return late[min(len(late)-1, int(p*float64(len(late))))] }
	t.Logf("%d timers: lateness p50 %s p99 %s max %s; duplicates %d", len(timers), pct(0.5), pct(0.99), late[len(late)-1], dups)
}
