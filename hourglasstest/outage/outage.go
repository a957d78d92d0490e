// Package outage runs the whole close path (SQLite store, engine, a delay
// mechanism against its real broker) through a broker outage, and checks
// that no order is lost and none is closed twice.
package outage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/sqlite"
)

// Config configures Run.
type Config struct {
	// Open returns the scheduler under test, connected to the real broker.
	// The store is passed for mechanisms that read it (sqlpoll).
	Open func(t *testing.T, store hourglass.Store) hourglass.Scheduler
	// Outage is called once, mid-load: it stops the broker and starts it
	// again, returning when the broker accepts connections again.
	Outage func(t *testing.T)
	// Orders is how many orders the load creates (default 400).
	Orders int
}

// Run creates orders (1–4 s timeouts, a fifth of them paid) while Outage
// stops and restarts the broker, waits for every deadline, then checks:
// no order is still pending, every unpaid order is closed, no paid order is
// closed, and per SKU available+reserved+sold is unchanged with reserved
// back to 0 and sold equal to what was paid: a double close would release
// stock twice and break it. It logs how many orders the sweeper had to
// close (what the mechanism lost or delayed during the outage).
//
// A test that stops a shared service states the Outage tier
// (testenv.Require); one whose outage is a no-op is in the Default tier.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	testenv.RequireDefault(t)
	if cfg.Orders == 0 {
		cfg.Orders = 400
	}
	ctx := context.Background()
	store, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sched := cfg.Open(t, store)
	obs := &observer{}
	eng, err := engine.New(store, engine.Config{Scheduler: sched, Observer: obs, SweepInterval: 500 * time.Millisecond, SweepGrace: 2 * time.Second, Window: 10 * time.Second, LoadInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const initial = 1_000_000
	skus := []string{"out-a", "out-b"}
	for _, sku := range skus {
		if _, err := store.PutProduct(ctx, hourglass.Product{SKU: sku, Available: initial}); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 30*time.Second, "the engine ready (recovery run)", eng.Ready)

	var (
		mu       sync.Mutex
		orders   []hourglass.Order
		paid     = map[int64]bool{}
		sold     = map[string]int64{}
		created  atomic.Int64
		wg       sync.WaitGroup
		outageAt = cfg.Orders / 3
		outage   sync.Once
	)
	start := time.Now()
	for i := range cfg.Orders {
		testenv.Until(ctx, start.Add(time.Duration(i)*5*time.Millisecond)) // 200 orders/s
		if i == outageAt {
			outage.Do(func() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t.Logf("outage starts after %d orders", created.Load())
					began := time.Now()
					cfg.Outage(t)
					t.Logf("broker back after %s", time.Since(began).Round(time.Millisecond))
				}()
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sku := skus[i%len(skus)]
			o, _, err := store.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint("u", i), Items: []hourglass.Item{{SKU: sku, Quantity: 1 + int64(i%3)}}, Timeout: time.Duration(1000+rand.IntN(3000)) * time.Millisecond})
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			created.Add(1)
			if i%5 == 0 {
				if _, err := store.PayOrder(ctx, o.ID, "p"); err == nil {
					mu.Lock()
					paid[o.ID] = true
					sold[sku] += o.Items[0].Quantity
					mu.Unlock()
				}
			}
			mu.Lock()
			orders = append(orders, o)
			mu.Unlock()
		}()
	}
	wg.Wait()
	var last time.Time
	for _, o := range orders {
		if o.Deadline.After(last) {
			last = o.Deadline
		}
	}
	open := 0
	waited := false
	defer func() {
		if !waited { // EventuallyEvery failed the test: say how many
			t.Logf("%d orders still pending 30 s after the last deadline", open)
		}
	}()
	testenv.EventuallyEvery(t, time.Until(last.Add(30*time.Second)), 50*time.Millisecond, "every order closed or paid 30 s after the last deadline", func() bool {
		pending, err := store.ListOrders(ctx, hourglass.OrderFilter{Status: hourglass.StatePendingPayment, Limit: 1, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := store.ListOrders(ctx, hourglass.OrderFilter{Limit: 1_000_000, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		open = 0
		for _, o := range stored {
			if o.Status == hourglass.StatePendingPayment {
				open++ // past the deadline but not yet closed by anyone
			}
		}
		return len(pending) == 0 && open == 0
	})
	waited = true
	stored, err := store.ListOrders(ctx, hourglass.OrderFilter{Limit: 1_000_000, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(orders) {
		t.Fatalf("%d orders stored, %d created", len(stored), len(orders))
	}
	for _, o := range stored {
		switch {
		case paid[o.ID] && o.Status != hourglass.StatePaid:
			t.Errorf("paid order %d is %s", o.ID, o.Status)
		case !paid[o.ID] && (o.Status != hourglass.StateClosed || o.ClosedAt.IsZero()):
			t.Errorf("unpaid order %d is %s (closed_at %v)", o.ID, o.Status, o.ClosedAt)
		}
	}
	for _, sku := range skus {
		p, err := store.Product(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		if p.Available+p.Reserved+p.Sold != initial || p.Reserved != 0 || p.Sold != sold[sku] {
			t.Errorf("%s: available %d reserved %d sold %d; want total %d, reserved 0, sold %d", sku, p.Available, p.Reserved, p.Sold, initial, sold[sku])
		}
	}
	byScheduler, bySweeper, stale, failures := obs.counts()
	t.Logf("%d orders in %s: %d paid, closed by %s %d, by the sweeper %d; no-op closes %d; scheduler failures %d",
		len(orders), time.Since(start).Round(time.Millisecond), len(paid), sched.Info().Name, byScheduler, bySweeper, stale, failures)
}

type observer struct {
	mu                                      sync.Mutex
	byScheduler, bySweeper, stale, failures int
}

func (o *observer) Closed(_ hourglass.ClosedOrder, swept bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if swept {
		o.bySweeper++
	} else {
		o.byScheduler++
	}
}
func (o *observer) Stale(n int)            { o.mu.Lock(); o.stale += n; o.mu.Unlock() }
func (o *observer) CloseFailed(int, error) {}
func (o *observer) Swept(int)              {}
func (o *observer) SchedulerFailed(error)  { o.mu.Lock(); o.failures++; o.mu.Unlock() }
func (o *observer) counts() (int, int, int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byScheduler, o.bySweeper, o.stale, o.failures
}
