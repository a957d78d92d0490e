package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/sqlite"
	"github.com/hourglass/hourglass/timing/timerloop"
)

type recorder struct {
	mu       sync.Mutex
	closed   []hourglass.ClosedOrder
	swept    int
	failures int
	stale    int
	changed  chan struct{} // closed and replaced at each close or failure
}

func (r *recorder) Closed(c hourglass.ClosedOrder, swept bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = append(r.closed, c)
	if swept {
		r.swept++
	}
	r.changedLocked()
}
func (r *recorder) CloseFailed(n int, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures += n
	r.changedLocked()
}

func (r *recorder) changedLocked() {
	if r.changed != nil {
		close(r.changed)
	}
	r.changed = make(chan struct{})
}

// await waits until the counts satisfy ok, or fails the test after limit
// (real time: the close path works on its own goroutines), saying what.
func (r *recorder) await(t testing.TB, limit time.Duration, what string, ok func(closed, swept, failures int) bool) {
	t.Helper()
	giveUp := time.NewTimer(limit)
	defer giveUp.Stop()
	for {
		r.mu.Lock()
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		closed, swept, failures, changed := len(r.closed), r.swept, r.failures, r.changed
		r.mu.Unlock()
		if ok(closed, swept, failures) {
			return
		}
		select {
		case <-changed:
		case <-giveUp.C:
			t.Fatalf("%s: not within %s (closed %d, swept %d, failures %d)", what, limit, closed, swept, failures)
		}
	}
}
func (r *recorder) Swept(int)   {}
func (r *recorder) Stale(n int) { r.mu.Lock(); r.stale += n; r.mu.Unlock() }
func (r *recorder) staleCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stale
}
func (r *recorder) SchedulerFailed(error) {}
func (r *recorder) counts() (closed, swept, failures int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.closed), r.swept, r.failures
}

type fixture struct {
	ctx   context.Context
	store *sqlite.Store
	clock hourglass.Clock
	rec   *recorder
}

func setup(t testing.TB, clock hourglass.Clock) fixture {
	t.Helper()
	s, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.PutProduct(context.Background(), hourglass.Product{SKU: "A", Available: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	return fixture{ctx: context.Background(), store: s, clock: clock, rec: &recorder{}}
}

func (f fixture) create(t testing.TB, timeout time.Duration) hourglass.Order {
	t.Helper()
	o, _, err := f.store.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (f fixture) engine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	cfg.Clock, cfg.Observer = f.clock, f.rec
	e, err := New(f.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestWindowHoldsOnlyNearDeadlines: the loader pages in only what is due
// within the window, and the next load brings in the next slice.
func TestWindowHoldsOnlyNearDeadlines(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		f.create(t, d)
	}
	e := f.engine(t, Config{Window: 3 * time.Minute, LoadInterval: time.Minute, LoadPageSize: 1})
	if err := e.loader.Load(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.Pending(); got != 2 {
		t.Fatalf("after the first load the wheel holds %d timers, want 2 (1m and 2m)", got)
	}
	clock.Advance(3 * time.Minute)
	if err := e.loader.Load(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.Pending(); got != 3 {
		t.Fatalf("after the second load: %d timers, want 3 (5m joined)", got)
	}
	// Schedule accepts what is inside the horizon and leaves the rest to the loader.
	e.Schedule(hourglass.DueItem{ID: 100, At: clock.Now().Add(time.Minute)})
	e.Schedule(hourglass.DueItem{ID: 101, At: clock.Now().Add(time.Hour)})
	if got := e.Pending(); got != 4 {
		t.Fatalf("after Schedule: %d timers, want 4", got)
	}
	e.Cancel(100)
	e.Cancel(100)
	if got := e.Pending(); got != 3 {
		t.Fatalf("after Cancel: %d timers, want 3", got)
	}
}

// TestRecoveryIsBackground: orders whose deadline passed while no engine
// ran do not hold up readiness; the first load hands them to the
// scheduler, which closes them all (the sweeper none) and leaves a future
// order pending.
func TestRecoveryIsBackground(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	var overdue []hourglass.Order
	for range 1200 { // more than one CloseBatch
		overdue = append(overdue, f.create(t, time.Second))
	}
	future := f.create(t, time.Hour)
	clock.Advance(time.Minute)
	e := f.engine(t, Config{LoadInterval: time.Minute})
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	// Ready at once: the fake clock stands still, so only the first load
	// and the close path run; the sweeper waits for an interval to pass.
	for !e.Ready() {
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	waitClosed(t, f.rec, len(overdue))
	// The sweep loop notes recovery at its ticks: move the fake clock a
	// tick at a time, once it sleeps again (with the timing loop and the
	// loader: three sleepers).
	for !e.Recovered() {
		if err := clock.BlockUntil(ctx, 3); err != nil {
			t.Fatal(err)
		}
		clock.Advance(DegradedSweepInterval)
	}
	if closed, swept, _ := f.rec.counts(); closed != len(overdue) || swept != 0 {
		t.Fatalf("recovery closed %d (swept %d), want %d by the close path", closed, swept, len(overdue))
	}
	for _, o := range []hourglass.Order{overdue[0], overdue[len(overdue)-1]} {
		got, _ := f.store.Order(f.ctx, o.ID)
		if got.Status != hourglass.StateClosed {
			t.Fatalf("order %d is %s after recovery", o.ID, got.Status)
		}
	}
	if got, _ := f.store.Order(f.ctx, future.ID); got.Status != hourglass.StatePendingPayment {
		t.Fatalf("future order is %s", got.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// pageGate is a scheduler that holds the first Schedule bringing orders
// beyond its first ones until release is closed (closing held then), and
// counts the orders and reminders it was handed.
type pageGate struct {
	hourglass.Scheduler
	first   int // orders let through before the gate holds
	held    chan struct{}
	release chan struct{}
	// ready, if set, is asked when the first orders arrive: readyEarly
	// records a yes (ready before any order was with the scheduler).
	ready func() bool

	mu                sync.Mutex
	orders, reminders int
	closedHeld        bool
	readyEarly        bool
}

func (g *pageGate) Schedule(ctx context.Context, items []hourglass.DueItem) error {
	orders, reminders := 0, 0
	for _, it := range items {
		switch hourglass.DueKindOf(it.ID) {
		case hourglass.DueOrder:
			orders++
		case hourglass.DueReminder:
			reminders++
		}
	}
	g.mu.Lock()
	if orders > 0 && g.orders == 0 && g.ready != nil && g.ready() {
		g.readyEarly = true
	}
	hold := orders > 0 && g.orders >= g.first
	if hold && !g.closedHeld {
		g.closedHeld = true
		close(g.held)
	}
	g.mu.Unlock()
	if hold {
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.mu.Lock()
	g.orders += orders
	g.reminders += reminders
	g.mu.Unlock()
	return g.Scheduler.Schedule(ctx, items)
}

func (g *pageGate) counts() (orders, reminders int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.orders, g.reminders
}

// TestReadyBeforeBacklogLoaded: with more overdue orders than a page,
// the engine is ready once every reminder and the first page of orders
// are with the scheduler, while the rest of the backlog is still to load.
// The scheduler holds the second page of orders: an engine that waited
// for every source's first page (the timers', paged after the last
// order) never turned ready, and a 1,000,000-order backlog held /readyz
// for 7 s (docs/benchmarks/mass-expiry.md).
func TestReadyBeforeBacklogLoaded(t *testing.T) {
	t.Parallel()
	const page, overdue = 10, 35
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	for range overdue {
		if _, _, err := f.store.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}},
			Timeout: 20 * time.Second, RemindBefore: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute) // every reminder and every deadline passed
	gate := &pageGate{Scheduler: timerloop.NewWheel(timerloop.Config{Clock: clock}), first: page, held: make(chan struct{}), release: make(chan struct{})}
	e := f.engine(t, Config{Scheduler: gate, LoadPageSize: page, LoadInterval: time.Minute})
	gate.ready = e.Ready
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-gate.held:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the loader never reached the second page of orders")
	}
	testenv.Eventually(t, 10*time.Second, "ready while the second page of orders waits", e.Ready)
	// Best effort (Run notes readiness on its own goroutine): ready on
	// the reminders' pages alone, before any order was scheduled.
	gate.mu.Lock()
	early := gate.readyEarly
	gate.mu.Unlock()
	if early {
		t.Fatal("ready before the first page of orders was with the scheduler")
	}
	if orders, reminders := gate.counts(); orders != page || reminders != overdue {
		t.Fatalf("ready with %d orders and %d reminders with the scheduler, want the first page (%d) and every reminder (%d)", orders, reminders, page, overdue)
	}
	close(gate.release)
	waitClosed(t, f.rec, overdue)
	if _, swept, _ := f.rec.counts(); swept != 0 {
		t.Fatalf("%d swept, want every overdue order closed by the close path", swept)
	}
}

// waitClosed waits (up to 30 s) until rec has seen n closes.
func waitClosed(t testing.TB, rec *recorder, n int) {
	t.Helper()
	rec.await(t, 30*time.Second, fmt.Sprintf("%d closes", n), func(closed, _, _ int) bool { return closed >= n })
}

// burstStore hides one order from the window loader (its query reaches
// past now; the sweeper's does not), so the mechanism really loses it, and
// holds every close until release is closed, except those whose context
// says ungated (the test's own sweep), so the burst stays in the close
// path's backlog while the test sweeps.
type burstStore struct {
	Store
	clock   hourglass.Clock
	lost    int64
	release chan struct{}
	gated   atomic.Int32 // close calls waiting at the gate
}

func (s *burstStore) PendingDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	page, err := s.Store.PendingDue(ctx, p)
	if p.Until.After(s.clock.Now()) {
		page = slices.DeleteFunc(page, func(t hourglass.DueItem) bool { return t.ID == s.lost })
	}
	return page, err
}

type ungated struct{}

func (s *burstStore) CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error) {
	if ctx.Value(ungated{}) == nil {
		s.gated.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.CloseOrders(ctx, ids)
}

// TestBurstClosedByClosePath: a flash sale's orders, all due at one
// instant and already more than the default sweep grace overdue while the
// close path works through them, are closed by the close path, not the
// sweeper, with no no-op closes and all their stock released; the sweeper
// still takes the one order the mechanism lost. A close path stuck for
// BacklogGrace is swept after all.
func TestBurstClosedByClosePath(t *testing.T) {
	t.Parallel()
	for _, stuck := range []bool{false, true} {
		t.Run(fmt.Sprintf("stuck=%v", stuck), func(t *testing.T) {
			t.Parallel()
			const n = 3000 // several dispatcher batches per worker
			clock := hourglasstest.NewClock(hourglasstest.Epoch)
			f := setup(t, clock)
			due := clock.Now().Add(10 * time.Second)
			createN(t, f, n, 10*time.Second)
			lost := f.create(t, 9*time.Second)
			clock.Set(due.Add(SweepGraceDefault + time.Second))
			bs := &burstStore{Store: f.store, clock: clock, lost: lost.ID, release: make(chan struct{})}
			e, err := New(bs, Config{Clock: clock, Observer: f.rec})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(f.ctx)
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			defer func() { cancel(); <-done }()
			// Wait until the first load is done and the burst has fired
			// into the close path, where the gate holds it (the timing
			// loop hands a burst to the dispatcher in one push, so one
			// close call at the gate means all of it is there).
			testenv.Eventually(t, 10*time.Second, "the first load done and the burst held at the close path's gate", func() bool {
				return e.Ready() && !e.loading.Load() && e.Pending() == 0 && bs.gated.Load() > 0
			})
			if oldest, _, ok := e.sched.(Backlogger).Backlog(); !ok || !oldest.Equal(due) {
				t.Fatalf("Backlog() = %v, %v; want the burst's deadline %v", oldest, ok, due)
			}
			if stuck {
				clock.Advance(BacklogGraceDefault)
			}
			swept, err := e.sweep(context.WithValue(f.ctx, ungated{}, true), e.cfg.SweepGrace, hourglass.CauseSweeper)
			if err != nil {
				t.Fatal(err)
			}
			close(bs.release)
			waitClosed(t, f.rec, n+1)
			if stuck {
				// The sweep loop may have swept some too (the clock moved).
				if _, swept, _ := f.rec.counts(); swept != n+1 {
					t.Fatalf("the sweeper closed %d orders of a stuck close path, want all %d", swept, n+1)
				}
				return // the held batches then closed nothing: no-ops, as a stuck close path must allow
			}
			if swept != 1 {
				t.Fatalf("the sweeper closed %d orders, want 1 (the lost one)", swept)
			}
			if closed, swept, failures := f.rec.counts(); closed != n+1 || swept != 1 || failures != 0 {
				t.Fatalf("closed %d, swept %d, failures %d; want %d closed, only the lost one swept", closed, swept, failures, n+1)
			}
			if stale := f.rec.staleCount(); stale != 0 {
				t.Errorf("%d no-op closes, want 0", stale)
			}
			p, err := f.store.Product(f.ctx, "A")
			if err != nil {
				t.Fatal(err)
			}
			if p.Reserved != 0 || p.Available != 1<<30 {
				t.Errorf("product after the burst: available %d, reserved %d; want all %d released", p.Available, p.Reserved, int64(1<<30))
			}
		})
	}
}

// createN creates n orders with the same timeout, concurrently (so they
// share group commits) and at one fake instant, so they share a deadline.
func createN(t testing.TB, f fixture, n int, timeout time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				if _, _, err := f.store.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: timeout}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestClosesOnTimeWithRealClock runs the whole engine: orders scheduled
// through Schedule and through the loader are closed by the wheel, never
// before their deadline, none by the sweeper.
func TestClosesOnTimeWithRealClock(t *testing.T) {
	t.Parallel()
	f := setup(t, hourglass.SystemClock{})
	e := f.engine(t, Config{Window: 2 * time.Second, LoadInterval: 100 * time.Millisecond, SweepInterval: 50 * time.Millisecond, SweepGrace: time.Second})
	preloaded := make([]hourglass.Order, 0, 100)
	for range 100 {
		preloaded = append(preloaded, f.create(t, 1500*time.Millisecond)) // within the first window
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	orders := append([]hourglass.Order(nil), preloaded...)
	for i := range 300 {
		o := f.create(t, time.Duration(1000+i*7)*time.Millisecond) // some beyond the window: the loader brings them
		e.Schedule(hourglass.DueItem{ID: o.ID, At: o.Deadline})
		orders = append(orders, o)
	}
	f.rec.await(t, 20*time.Second, "every order closed", func(closed, _, _ int) bool { return closed == len(orders) })
	_, swept, failures := f.rec.counts()
	if swept != 0 || failures != 0 {
		t.Errorf("sweeper closed %d, failures %d; want all by the wheel", swept, failures)
	}
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	var worst time.Duration
	for _, c := range f.rec.closed {
		late := c.ClosedAt.Sub(c.Deadline)
		if late < 0 {
			t.Errorf("order %d closed %s before its deadline", c.OrderID, -late)
		}
		worst = max(worst, late)
	}
	t.Logf("worst lateness of %d closes: %s", len(f.rec.closed), worst)
}

// flakyStore fails the first n CloseOrders calls.
type flakyStore struct {
	Store
	failures atomic.Int32
}

func (s *flakyStore) CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error) {
	if s.failures.Add(-1) >= 0 {
		return nil, errors.New("disk on fire")
	}
	return s.Store.CloseOrders(ctx, ids)
}

// TestFailedCloseIsRetried: a close that fails is retried with backoff and
// counted, and the order still closes.
func TestFailedCloseIsRetried(t *testing.T) {
	t.Parallel()
	f := setup(t, hourglass.SystemClock{})
	fs := &flakyStore{Store: f.store}
	fs.failures.Store(3)
	e, err := New(fs, Config{Clock: f.clock, Observer: f.rec, SweepInterval: time.Hour, LoadInterval: time.Second, Window: time.Minute, RetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-e.firstPage // the horizon is up: Schedule takes the order
	o := f.create(t, time.Second)
	e.Schedule(hourglass.DueItem{ID: o.ID, At: o.Deadline})
	f.rec.await(t, 10*time.Second, "the order closed after failing closes", func(closed, _, _ int) bool { return closed == 1 })
	if _, _, failures := f.rec.counts(); failures != 3 {
		t.Fatalf("failures counted %d, want 3", failures)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"load interval not below window", Config{Window: time.Minute, LoadInterval: time.Minute}, false},
		{"tiny window", Config{Window: time.Millisecond}, false},
		{"negative batch", Config{CloseBatch: -1}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// brokenScheduler is a mechanism whose broker is down: Run fails at once.
type brokenScheduler struct{ hourglass.Scheduler }

func (brokenScheduler) Run(context.Context, hourglass.Deliver) error {
	return errors.New("connection refused (simulated outage)")
}

// TestDegradedSchedulerSweepsOnTime: while the delay mechanism fails, the
// engine reports unhealthy and the sweeper closes due orders from the
// database with no grace, within a few hundred ms of their deadline.
func TestDegradedSchedulerSweepsOnTime(t *testing.T) {
	t.Parallel()
	f := setup(t, hourglass.SystemClock{})
	e := f.engine(t, Config{Scheduler: brokenScheduler{timerloop.NewWheel(timerloop.Config{})}, SweepInterval: time.Hour, RetryMax: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	o := f.create(t, time.Second)
	e.Schedule(hourglass.DueItem{ID: o.ID, At: o.Deadline})
	f.rec.await(t, 10*time.Second, "the order closed while the scheduler was down", func(closed, _, _ int) bool { return closed == 1 })
	if _, swept, _ := f.rec.counts(); swept != 1 {
		t.Fatalf("closed by the scheduler, which is down")
	}
	if err := e.Healthy(); err == nil {
		t.Error("Healthy() = nil while the scheduler fails")
	}
	f.rec.mu.Lock()
	late := f.rec.closed[0].ClosedAt.Sub(f.rec.closed[0].Deadline)
	f.rec.mu.Unlock()
	if late > time.Second {
		t.Errorf("closed %s after its deadline while degraded; want within the degraded sweep interval", late)
	}
	t.Logf("closed %s after its deadline by the degraded sweeper", late)
}

// TestSweeperDefersToDeliveringBroker: for a mechanism whose queue the
// engine cannot see, the sweeper leaves alone deadlines from its latest
// delivery's earliest on while it keeps delivering (a broker working
// through a burst), takes what is older (lost) or more than
// BrokerBacklogMax late, and once the mechanism has gone quiet for
// max(SweepGrace, 1 s) sweeps as before.
func TestSweeperDefersToDeliveringBroker(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	// brokenScheduler hides the wheel's Backlog, as a broker has none.
	e := f.engine(t, Config{Scheduler: brokenScheduler{timerloop.NewWheel(timerloop.Config{Clock: clock})}})
	burst := clock.Now()
	clock.Advance(3 * time.Second) // the broker delivers the burst 3 s late
	if err := e.deliver(f.ctx, []hourglass.DueItem{{ID: 1 << 40, At: burst}}); err != nil {
		t.Fatal(err)
	}
	if got, want := e.sweepUntil(e.cfg.SweepGrace), burst.Add(-time.Millisecond); !got.Equal(want) {
		t.Errorf("while the broker delivers the burst: sweep until %v, want %v (just before the burst)", got, want)
	}
	clock.Advance(BrokerBacklogMax - 3*time.Second + time.Second) // still delivering, but the burst is 6 s late now
	if err := e.deliver(f.ctx, []hourglass.DueItem{{ID: 1 << 40, At: burst}}); err != nil {
		t.Fatal(err)
	}
	if got, want := e.sweepUntil(e.cfg.SweepGrace), clock.Now().Add(-BrokerBacklogMax); !got.Equal(want) {
		t.Errorf("with the burst %s late: sweep until %v, want now − BrokerBacklogMax %v", BrokerBacklogMax+time.Second, got, want)
	}
	clock.Advance(e.cfg.SweepGrace + time.Millisecond)
	if got, want := e.sweepUntil(e.cfg.SweepGrace), clock.Now().Add(-e.cfg.SweepGrace); !got.Equal(want) {
		t.Errorf("after the broker went quiet: sweep until %v, want now − grace %v", got, want)
	}
}
