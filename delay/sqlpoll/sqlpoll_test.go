package sqlpoll_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/sqlpoll"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/store/sqlite"
)

// TestConformance runs the scheduler suite against real SQLite databases.
//
// The suite schedules synthetic timers with ids it chooses; sqlpoll's
// timers are pending orders, and the database chooses their ids. So the
// harness turns each scheduled timer into a real order whose deadline is
// the timer's, and maps the order's id back to the suite's id on delivery:
// see suiteDB. Everything between the database and the delivery is
// sqlpoll's real code. The schedulers of one namespace share one store
// handle; TestConcurrentPollersCloseOnce gives each poller its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		dbs = map[string]*suiteDB{}
	)
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler {
			mu.Lock()
			db, ok := dbs[ns]
			if !ok {
				db = newSuiteDB(t)
				dbs[ns] = db
			}
			mu.Unlock()
			return db.newScheduler(t, sqlpoll.Config{})
		},
		// A due order waits for the next scan: up to one interval.
		MaxLateness: sqlpoll.PollIntervalDefault + time.Second,
		// A failed delivery is retried at the next scan.
		Redelivery: sqlpoll.PollIntervalDefault + time.Second,
	})
}

// suiteDB is one namespace of the conformance suite: a SQLite database
// shared by every scheduler of the namespace, as by two processes.
//
// The store sets an order's deadline to its clock's now + timeout, so while
// the harness creates the suite's timers as orders it stops the store's
// clock at a fixed instant before all of them, epoch, and gives each order
// the timeout deadline − epoch: the order's deadline is the timer's to the
// millisecond. The rest of the time the clock is the real one. Closes wait
// while the clock is stopped (they would read the stopped time), which
// delays them by at most one Schedule call; a second store handle with its
// own clock would avoid that but makes two SQLite writers, which starve
// each other past the busy timeout under the race detector.
type suiteDB struct {
	store *sqlite.Store
	clock *stoppableClock
	epoch time.Time

	// writes is held for writing while the clock is stopped, and for
	// reading by closes.
	writes sync.RWMutex

	mu      sync.Mutex
	suiteID map[int64]int64 // order id → the suite's timer id
}

// stoppableClock is the real clock, or a fixed time while stopped.
type stoppableClock struct {
	mu      sync.Mutex
	stopped time.Time
}

func (c *stoppableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped.IsZero() {
		return c.stopped
	}
	return time.Now()
}

func (c *stoppableClock) set(t time.Time) {
	c.mu.Lock()
	c.stopped = t
	c.mu.Unlock()
}

func newSuiteDB(t *testing.T) *suiteDB {
	t.Helper()
	db := &suiteDB{clock: &stoppableClock{}, epoch: time.Now().Add(-hourglass.MinTimeout).Truncate(time.Millisecond), suiteID: map[int64]int64{}}
	store, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Clock: db.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	db.store = store
	if _, err := store.PutProduct(context.Background(), hourglass.Product{SKU: "suite", Available: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	return db
}

// newScheduler returns a sqlpoll scheduler over the namespace's database,
// wrapped for the suite.
func (db *suiteDB) newScheduler(t *testing.T, cfg sqlpoll.Config) hourglass.Scheduler {
	t.Helper()
	cfg.Store = db.store
	s, err := sqlpoll.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &suiteScheduler{Scheduler: s, db: db}
}

// suiteScheduler is sqlpoll as the suite sees it: Schedule commits orders,
// and delivery maps order ids to the suite's ids, hands the timers to the
// suite's deliver (the effect) and then closes the orders (the
// acknowledgement, which the engine's deliver does in production).
type suiteScheduler struct {
	*sqlpoll.Scheduler
	db *suiteDB
}

// Schedule creates one pending order per timer, due at the timer's deadline.
func (s *suiteScheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	db := s.db
	db.writes.Lock()
	defer db.writes.Unlock()
	db.clock.set(db.epoch)
	defer db.clock.set(time.Time{})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, tm := range timers {
		wg.Go(func() {
			o, _, err := db.store.CreateOrder(ctx, hourglass.CreateOrderParams{
				UserID:  fmt.Sprint("suite-", tm.ID),
				Items:   []hourglass.Item{{SKU: "suite", Quantity: 1}},
				Timeout: tm.At.Sub(db.epoch),
			})
			if err == nil && !o.Deadline.Equal(tm.At) {
				err = fmt.Errorf("order %d due %v, timer %d due %v", o.ID, o.Deadline, tm.ID, tm.At)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			db.mu.Lock()
			db.suiteID[o.ID] = tm.ID
			db.mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *suiteScheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	db := s.db
	return s.Scheduler.Run(ctx, func(ctx context.Context, due []hourglass.DueItem) error {
		suite := make([]hourglass.DueItem, len(due))
		ids := make([]int64, len(due))
		db.mu.Lock()
		for i, tm := range due {
			id, ok := db.suiteID[tm.ID]
			if !ok {
				db.mu.Unlock()
				return fmt.Errorf("delivered order %d that the suite did not schedule", tm.ID)
			}
			suite[i] = hourglass.DueItem{ID: id, At: tm.At}
			ids[i] = tm.ID
		}
		db.mu.Unlock()
		if err := deliver(ctx, suite); err != nil {
			return err
		}
		db.writes.RLock()
		defer db.writes.RUnlock()
		_, err := db.store.CloseOrders(ctx, ids)
		return err
	})
}

// TestConcurrentPollersCloseOnce runs two pollers, each with its own store
// handle, over one PostgreSQL database with the engine's delivery (the
// store's close), as two hourglass processes would (one SQLite file has one
// process): the poller claims no rows, so both may read the same due
// orders, and the close's compare-and-set must make every order close
// exactly once and release its stock once.
func TestConcurrentPollersCloseOnce(t *testing.T) {
	t.Parallel()
	const (
		orders  = 3000
		initial = 1 << 40
	)
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	open := func() hourglass.Database {
		s, err := store.Open(ctx, store.Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	entry := open()
	if _, err := entry.PutProduct(ctx, hourglass.Product{SKU: "two", Available: initial}); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		closes  = map[int64]int{}
		reads   = map[int64]int{}
		created = map[int64]time.Time{}
		errs    []error
	)
	for i := range orders {
		wg.Go(func() {
			o, _, err := entry.CreateOrder(ctx, hourglass.CreateOrderParams{
				UserID:  fmt.Sprint("u", i),
				Items:   []hourglass.Item{{SKU: "two", Quantity: 2}},
				Timeout: time.Second + time.Duration(i%50)*time.Millisecond,
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			created[o.ID] = o.Deadline
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pollers sync.WaitGroup
	for range 2 {
		store := open()
		// A short interval and small pages make the two scans overlap.
		s, err := sqlpoll.New(ctx, sqlpoll.Config{Store: store, PollInterval: 20 * time.Millisecond, Batch: 50})
		if err != nil {
			t.Fatal(err)
		}
		pollers.Go(func() {
			err := s.Run(ctx, func(ctx context.Context, due []hourglass.DueItem) error {
				now := time.Now()
				ids := make([]int64, len(due))
				for i, tm := range due {
					ids[i] = tm.ID
					if now.Before(tm.At) {
						t.Errorf("order %d delivered %s early", tm.ID, tm.At.Sub(now))
					}
				}
				closed, err := store.CloseOrders(ctx, ids)
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					reads[id]++
				}
				for _, c := range closed {
					closes[c.OrderID]++
				}
				return err
			})
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	testenv.Eventually(t, 20*time.Second, "every order closed", func() bool {
		pending, err := entry.PendingDue(ctx, hourglass.PendingDueParams{Until: time.Now().Add(time.Hour), Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		return len(pending) == 0
	})

	cancel()
	pollers.Wait()
	mu.Lock()
	defer mu.Unlock()
	doubleReads := 0
	for id := range created {
		if closes[id] != 1 {
			t.Errorf("order %d closed %d times", id, closes[id])
		}
		doubleReads += reads[id] - 1
	}
	p, err := entry.Product(context.Background(), "two")
	if err != nil {
		t.Fatal(err)
	}
	if p.Available != initial || p.Reserved != 0 || p.Sold != 0 {
		t.Errorf("stock: available %d reserved %d sold %d; want %d, 0, 0 (a double close releases twice)", p.Available, p.Reserved, p.Sold, initial)
	}
	t.Logf("%d orders closed once each; %d deliveries were duplicates absorbed by the close's compare-and-set", len(created), doubleReads)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	store := failingStore{}
	tests := []struct {
		name string
		cfg  sqlpoll.Config
		want string // part of the error; "" for valid
	}{
		{"defaults", sqlpoll.Config{Store: store}, ""},
		{"no store", sqlpoll.Config{}, "Store is required"},
		{"shortest interval", sqlpoll.Config{Store: store, PollInterval: sqlpoll.PollIntervalMin}, ""},
		{"longest interval", sqlpoll.Config{Store: store, PollInterval: sqlpoll.PollIntervalMax}, ""},
		{"interval too short", sqlpoll.Config{Store: store, PollInterval: time.Millisecond}, "poll interval must be between 10ms and 1h0m0s, got 1ms"},
		{"interval too long", sqlpoll.Config{Store: store, PollInterval: 2 * time.Hour}, "poll interval"},
		{"negative interval", sqlpoll.Config{Store: store, PollInterval: -time.Second}, "poll interval"},
		{"largest batch", sqlpoll.Config{Store: store, Batch: sqlpoll.BatchMax}, ""},
		{"batch too large", sqlpoll.Config{Store: store, Batch: sqlpoll.BatchMax + 1}, "Batch must be between 1 and 100000"},
		{"negative batch", sqlpoll.Config{Store: store, Batch: -1}, "Batch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// failingStore is a database that cannot be read.
type failingStore struct{}

func (failingStore) PendingDue(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	return nil, errors.New("database is locked (simulated)")
}

// TestNewChecksTheStore checks the start-up error for a database that
// cannot be read, and that a readable one is accepted.
func TestNewChecksTheStore(t *testing.T) {
	t.Parallel()
	_, err := sqlpoll.New(context.Background(), sqlpoll.Config{Store: failingStore{}})
	if err == nil || err.Error() != "sqlpoll: check the order database can be scanned: database is locked (simulated)" {
		t.Errorf("New over a failing store = %v", err)
	}
	store, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := sqlpoll.New(context.Background(), sqlpoll.Config{Store: store}); err != nil {
		t.Errorf("New over a fresh SQLite store: %v", err)
	}
}

// TestScansOnlyOwnedPartitions: with Parts, a scan delivers only the due
// orders of the partitions the node owns.
func TestScansOnlyOwnedPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := hourglasstest.NewClock(time.Now())
	db, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.PutProduct(ctx, hourglass.Product{SKU: "p", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 10 {
		o, _, err := db.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint("u", i), Items: []hourglass.Item{{SKU: "p", Quantity: 1}}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	owned := hourglass.Parts{hourglass.PartitionOf(ids[0]), hourglass.PartitionOf(ids[3])}
	s, err := sqlpoll.New(ctx, sqlpoll.Config{Store: db, Clock: clock, PollInterval: 20 * time.Millisecond, Parts: func() hourglass.Parts { return owned }})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(1100 * time.Millisecond) // every order due
	runCtx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	got := map[int64]bool{}
	done := make(chan error, 1)
	go func() {
		done <- s.Run(runCtx, func(_ context.Context, due []hourglass.DueItem) error {
			mu.Lock()
			defer mu.Unlock()
			for _, t := range due {
				got[t.ID] = true
			}
			return nil
		})
	}()
	// A scan that delivered an order of a partition not owned would deliver
	// it with the owned ones: wait for those, then look at everything.
	testenv.Eventually(t, 10*time.Second, "the owned partitions' orders delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if owned.Has(id) && !got[id] {
				return false
			}
		}
		return true
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if got[id] != owned.Has(id) {

			t.Errorf("order %d (partition %d) delivered = %v; owned partitions %v", id, hourglass.PartitionOf(id), got[id], owned)
		}
	}
}
