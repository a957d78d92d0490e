package bulk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/bulk"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/sqlite"
)

type fixture struct {
	ctx   context.Context
	db    *sqlite.Store
	clock *hourglasstest.Clock
}

func setup(t *testing.T) fixture {
	t.Helper()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	db, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return fixture{ctx: context.Background(), db: db, clock: clock}
}

// start runs a runner over store until the test ends (or stop is called).
func (f fixture) start(t *testing.T, store bulk.Store, owner string, page int) (r *bulk.Runner, stop func()) {
	t.Helper()
	r, err := bulk.New(bulk.Config{Store: store, Owner: owner, Clock: f.clock, Page: page, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return r, stop
}

func (f fixture) create(t *testing.T, action hourglass.BulkActionKind, spec bulk.Spec, rate int) hourglass.BulkAction {
	t.Helper()
	raw, err := jsonOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	a, created, err := f.db.CreateBulkAction(f.ctx, hourglass.BulkAction{
		ID: bulk.NewID(f.clock.Now()), Action: action, Reason: "test", Spec: raw, RunningKey: bulk.RunningKey(action, spec), Rate: rate})
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	return a
}

// waitFor polls the action until ok says yes (real time, bounded).
func (f fixture) waitFor(t *testing.T, id string, what string, ok func(hourglass.BulkAction) bool) hourglass.BulkAction {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a, err := f.db.BulkAction(f.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %+v", what, a)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f fixture) armTimers(t *testing.T, prefix string, n int) {
	t.Helper()
	for i := range n {
		if _, _, err := f.db.ArmTimer(f.ctx, hourglass.ArmTimerParams{Key: fmt.Sprintf("%s%03d", prefix, i), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
}

func (f fixture) timerCounts(t *testing.T) map[hourglass.TimerStatus]int64 {
	t.Helper()
	c, err := f.db.TimerCounts(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func scheduledPrefix(prefix string) bulk.Spec {
	return bulk.Spec{Timers: &hourglass.TimerFilter{Status: hourglass.TimerScheduled, Prefix: prefix}}
}

// TestCancelTimersByPrefix: every scheduled timer of the prefix is
// cancelled, page by page; the others are left; the action ends done with
// its counts.
func TestCancelTimersByPrefix(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.armTimers(t, "coupon:spring:", 25)
	f.armTimers(t, "coupon:summer:", 5)
	n, more, err := bulk.Count(f.ctx, f.db, hourglass.BulkCancelTimers, scheduledPrefix("coupon:spring:"), 1000)
	if err != nil || n != 25 || more {
		t.Fatalf("count: %d %v %v", n, more, err)
	}
	if n, more, _ := bulk.Count(f.ctx, f.db, hourglass.BulkCancelTimers, scheduledPrefix("coupon:"), 10); n != 10 || !more {
		t.Fatalf("count capped: %d %v", n, more)
	}
	a := f.create(t, hourglass.BulkCancelTimers, scheduledPrefix("coupon:spring:"), 0)
	f.start(t, f.db, "node-a", 10)
	got := f.waitFor(t, a.ID, "done", func(a hourglass.BulkAction) bool { return a.State != hourglass.BulkRunning })
	if got.State != hourglass.BulkDone || got.Done != 25 || got.Failed != 0 || got.Matched != 25 || got.FinishedAt.IsZero() {
		t.Fatalf("finished: %+v", got)
	}
	if c := f.timerCounts(t); c[hourglass.TimerCancelled] != 25 || c[hourglass.TimerScheduled] != 5 {
		t.Fatalf("timers: %v", c)
	}
}

// dying is a store whose ApplyBulk commits pages until it has let through
// limit of them, then commits the next one and "dies" before the runner
// hears of it: every later call fails, as a killed node's would.
type dying struct {
	bulk.Store
	limit int32
	calls atomic.Int32
	dead  chan struct{}
	once  sync.Once
}

var errDead = errors.New("node killed")

func (d *dying) ApplyBulk(ctx context.Context, items []hourglass.BulkItem, p *hourglass.BulkProgress) ([]hourglass.BulkItemResult, error) {
	n := d.calls.Add(1)
	if n > d.limit+1 {
		return nil, errDead
	}
	res, err := d.Store.ApplyBulk(ctx, items, p)
	if n == d.limit+1 {
		d.once.Do(func() { close(d.dead) })
		return nil, errDead // committed, but the node is gone
	}
	return res, err
}

// ReleaseBulkAction fails once the node is dead: a killed node releases
// nothing.
func (d *dying) ReleaseBulkAction(ctx context.Context, id, owner string) error {
	select {
	case <-d.dead:
		return errDead
	default:
		return d.Store.ReleaseBulkAction(ctx, id, owner)
	}
}

// TestTakeOverAfterDeath: node A dies after its third page committed;
// once A's lease runs out node B claims the action and finishes it from
// the page after, so every order is cancelled exactly once (one
// order.cancelled event each) and the counts add up.
func TestTakeOverAfterDeath(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.db.PutProduct(f.ctx, hourglass.Product{SKU: "A", Name: "A", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for range 47 {
		o, _, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u1", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	spec := bulk.Spec{Orders: &hourglass.OrderFilter{Status: hourglass.StatePendingPayment}}
	a := f.create(t, hourglass.BulkCancelOrders, spec, 0)
	nodeA := &dying{Store: f.db, limit: 2, dead: make(chan struct{})}
	_, stopA := f.start(t, nodeA, "node-a", 10)
	<-nodeA.dead
	stopA()
	mid, _ := f.db.BulkAction(f.ctx, a.ID)
	if mid.Done != 30 || mid.State != hourglass.BulkRunning || mid.Owner != "node-a" {
		t.Fatalf("after A died: %+v", mid)
	}
	rB, _ := f.start(t, f.db, "node-b", 10)
	rB.Wake()
	// B may not take it while A's lease runs.
	time.Sleep(50 * time.Millisecond)
	if got, _ := f.db.BulkAction(f.ctx, a.ID); got.Owner != "node-a" {
		t.Fatalf("taken over before the lease ran out: %+v", got)
	}
	f.clock.Advance(11 * time.Second)
	rB.Wake()
	got := f.waitFor(t, a.ID, "done", func(a hourglass.BulkAction) bool { return a.State != hourglass.BulkRunning })
	if got.State != hourglass.BulkDone || got.Done != 47 || got.Failed != 0 || got.Matched != 47 {
		t.Fatalf("finished: %+v", got)
	}
	for _, id := range ids {
		evs, err := f.db.OrderEvents(f.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		cancelled := 0
		for _, e := range evs {
			if e.Type == hourglass.EventOrderCancelled {
				cancelled++
			}
		}
		if cancelled != 1 {
			t.Fatalf("order %d: %d order.cancelled events, want 1", id, cancelled)
		}
	}
}

// TestReleaseOnShutdown: a runner stopped (its node shut down) releases
// its lease, so another claims the action at once, without waiting for
// the lease to run out, and finishes it.
func TestReleaseOnShutdown(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.armTimers(t, "t:", 30)
	a := f.create(t, hourglass.BulkCancelTimers, scheduledPrefix("t:"), 5)
	rA, stopA := f.start(t, f.db, "node-a", 100)
	rA.Wake()
	f.waitFor(t, a.ID, "5 done", func(a hourglass.BulkAction) bool { return a.Done >= 5 })
	stopA()
	if got, _ := f.db.BulkAction(f.ctx, a.ID); got.Owner != "" || got.State != hourglass.BulkRunning {
		t.Fatalf("after node-a stopped: %+v", got)
	}
	rB, _ := f.start(t, f.db, "node-b", 100)
	rB.Wake()
	f.waitFor(t, a.ID, "node-b holds it", func(a hourglass.BulkAction) bool { return a.Owner == "node-b" })
	for {
		got, _ := f.db.BulkAction(f.ctx, a.ID)
		if got.State != hourglass.BulkRunning {
			if got.State != hourglass.BulkDone || got.Done != 30 {
				t.Fatalf("finished: %+v", got)
			}
			return
		}
		f.clock.Advance(time.Second) // the rate's waits, on the fake clock
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRateAndStop: at rate 5 a second on a stopped fake clock the runner
// applies 5 items and waits; a second later 5 more. A stop commits at
// once: from then on not one more item is done, though the runner was
// mid-way, and it lets go of the action.
func TestRateAndStop(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.armTimers(t, "t:", 40)
	a := f.create(t, hourglass.BulkCancelTimers, scheduledPrefix("t:"), 5)
	r, _ := f.start(t, f.db, "node-a", 100)
	r.Wake()
	f.waitFor(t, a.ID, "5 done", func(a hourglass.BulkAction) bool { return a.Done >= 5 })
	// The runner sleeps on the fake clock now: nothing more until it moves.
	if err := f.clock.BlockUntil(f.ctx, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got, _ := f.db.BulkAction(f.ctx, a.ID); got.Done != 5 {
		t.Fatalf("at rate 5 on a stopped clock: %d done, want 5", got.Done)
	}
	f.clock.Advance(time.Second)
	f.waitFor(t, a.ID, "10 done", func(a hourglass.BulkAction) bool { return a.Done >= 10 })
	if err := f.clock.BlockUntil(f.ctx, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s, err := f.db.StopBulkAction(f.ctx, a.ID)
	if err != nil || s.State != hourglass.BulkStopped {
		t.Fatalf("stop: %+v %v", s, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("stop took %v", took)
	}
	for range 5 {
		f.clock.Advance(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
	got, _ := f.db.BulkAction(f.ctx, a.ID)
	if got.State != hourglass.BulkStopped || got.Done != 10 {
		t.Fatalf("after stop: %+v", got)
	}
	if c := f.timerCounts(t); c[hourglass.TimerCancelled] != 10 {
		t.Fatalf("timers after stop: %v", c)
	}
}

// TestRetryDeadLettersOnce: a bulk retry makes each dead letter pending
// once, tells the webhook service, and a letter that dies again later is
// not retried by the same action (its failure is after the action's
// bound).
func TestRetryDeadLettersOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.db.PutProduct(f.ctx, hourglass.Product{SKU: "A", Name: "A", Available: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: "https://hooks.example.com/a", Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: "0123456789abcdefa"}, 0); err != nil {
		t.Fatal(err)
	}
	for range 12 {
		if _, _, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u1", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	due, err := f.db.DueDeliveries(f.ctx, hourglass.DueDeliveriesParams{Until: f.clock.Now().Add(time.Hour), Limit: 100})
	if err != nil || len(due) != 12 {
		t.Fatalf("due: %d %v", len(due), err)
	}
	for _, d := range due {
		pd, err := f.db.PendingDelivery(f.ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: "down", WebhookID: pd.WebhookID, OrderID: pd.OrderID}); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(time.Second)
	spec := bulk.Spec{DeadLetters: &hourglass.DeadLetterFilter{FailedBefore: f.clock.Now()}}
	a := f.create(t, hourglass.BulkRetryDeadLetters, spec, 0)
	var (
		mu      sync.Mutex
		retried []int64
	)
	r, err := bulk.New(bulk.Config{Store: f.db, Owner: "n", Clock: f.clock, Page: 5, Retried: func(ts []hourglass.DeliveryTimer) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ts {
			retried = append(retried, d.ID)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	go r.Run(ctx)
	got := f.waitFor(t, a.ID, "done", func(a hourglass.BulkAction) bool { return a.State != hourglass.BulkRunning })
	if got.State != hourglass.BulkDone || got.Done != 12 {
		t.Fatalf("finished: %+v", got)
	}
	// The webhook service is told after each page's commit: the last
	// page's telling may follow the commit that finished the action.
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(retried)
	}
	testenv.Eventually(t, 5*time.Second, "the webhook service told of the 12 retries", func() bool { return count() >= 12 })
	if n := count(); n != 12 {
		t.Fatalf("told the webhook service of %d retries, want 12", n)
	}
}

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }
