package benchmark

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/webhook"
)

// System is a delay mechanism the runner opens in-process, behind a node
// started through node.New, as `hourglass serve` starts one.
type System struct {
	Name string
	Feed hourglass.Feed
	// Open connects a fresh instance; store is the run's order database.
	Open func(ctx context.Context, store hourglass.Store) (hourglass.Scheduler, error)
}

// RunInProcess runs the workload on sys with a fresh, empty database on the
// server databaseURL names (store.OpenScratch: SQLite in a temporary
// directory when it is empty), then (for in-memory mechanisms, if pending >
// 0) measures the heap held per pending timer with that many timers
// scheduled.
func RunInProcess(ctx context.Context, sys System, databaseURL string, w Workload, pending int, progress Progress) (Result, error) {
	obs := &counter{}
	run, err := startSystem(ctx, sys, databaseURL, engine.Config{SweepGrace: w.Grace, SweepInterval: 500 * time.Millisecond}, webhook.Config{}, obs)
	if err != nil {
		return Result{System: sys.Name}, err
	}
	defer run.drop()
	res, err := Drive(ctx, sys.Name, &storeTarget{store: run.db, history: run.db}, w, progress, obs.sweptCount, obs.noopCount)
	run.stop()
	if err != nil {
		return res, err
	}
	if pending > 0 && sys.Feed == hourglass.FeedWindow {
		res.PendingCount = pending
		res.BytesPerPendingTimer, err = bytesPerTimer(ctx, sys, run.db, pending)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// running is a system started by startSystem: a node over a fresh
// database and the mechanism.
type running struct {
	db hourglass.Database
	n  *node.Node
	// stop ends the node (idempotent); drop stops, then drops the
	// database.
	stop, drop func()
}

// startSystem starts a node through node.New, as `hourglass serve` does,
// on a fresh, empty database on the server databaseURL names (SQLite in a
// temporary directory when it is empty), with sys as its mechanism and
// obs told what its engine does; engCfg and hooks are the node's engine
// and webhook settings. It returns once the engine is ready. The caller
// must call drop.
func startSystem(ctx context.Context, sys System, databaseURL string, engCfg engine.Config, hooks webhook.Config, obs engine.Observer) (*running, error) {
	opts, dropDB, err := scratch(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	engCfg.Observer = obs
	n, err := node.New(ctx, node.Config{
		Addr:      "127.0.0.1:0",
		Store:     opts,
		Delay:     sys.Name,
		OpenDelay: func(ctx context.Context, o delay.Options) (hourglass.Scheduler, error) { return sys.Open(ctx, o.Store) },
		DelayFeed: sys.Feed,
		Engine:    engCfg,
		Webhooks:  hooks,
		Logger:    quietLogger(),
	})
	if err != nil {
		dropDB()
		return nil, fmt.Errorf("open %s: %w", sys.Name, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(runCtx) }()
	var once sync.Once
	r := &running{db: n.Store, n: n}
	r.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			n.Close()
		})
	}
	r.drop = func() {
		r.stop()
		dropDB()
	}
	for !n.Engine.Ready() {
		select {
		case err := <-done:
			done <- err // for stop
			r.drop()
			return nil, fmt.Errorf("node: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return r, nil
}

// scratch returns the store options of a new, empty database on the
// server url names, and drop, which deletes it: SQLite in a new temporary
// directory when url is empty; on PostgreSQL and MySQL a new database
// beside the URL's (the user needs the right to create databases), so the
// URL's own data is never touched.
func scratch(ctx context.Context, url string) (store.Options, func(), error) {
	kind, err := store.Kind(url)
	if err != nil {
		return store.Options{}, nil, err
	}
	create := postgres.CreateScratch
	switch kind {
	case store.KindSQLite:
		if url != "" {
			return store.Options{}, nil, fmt.Errorf("database URL %s: a scratch SQLite database is made in a temporary directory; pass no sqlite URL", store.Redact(url))
		}
		dir, err := os.MkdirTemp("", "hourglass-scratch-*")
		if err != nil {
			return store.Options{}, nil, err
		}
		return store.Options{DataDir: dir}, func() { os.RemoveAll(dir) }, nil
	case store.KindMySQL:
		create = mysql.CreateScratch
	}
	u, dropDB, err := create(ctx, url)
	if err != nil {
		return store.Options{}, nil, err
	}
	return store.Options{URL: u}, func() { _ = dropDB(context.Background()) }, nil
}

// bytesPerTimer schedules n timers an hour ahead on a fresh instance and
// returns the live heap it grew by, per timer.
func bytesPerTimer(ctx context.Context, sys System, store hourglass.Store, n int) (float64, error) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	sched, err := sys.Open(ctx, store)
	if err != nil {
		return 0, err
	}
	defer sched.Close()
	base := time.Now().Add(time.Hour)
	batch := make([]hourglass.DueItem, 0, 10000)
	for i := range n {
		batch = append(batch, hourglass.DueItem{ID: int64(i + 1), At: base.Add(time.Duration(i%600000) * time.Millisecond)})
		if len(batch) == cap(batch) || i == n-1 {
			if err := sched.Schedule(ctx, batch); err != nil {
				return 0, err
			}
			batch = batch[:0]
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(sched)
	return float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(n), nil
}

// storeTarget drives the in-process store exactly as the API handlers do;
// the store announces what is due to the engine (hourglass.DueFeed).
type storeTarget struct {
	store   hourglass.Store
	history hourglass.HistoryStore // for Expiring
	timers  hourglass.TimerStore   // for the timers workload
}

func (t *storeTarget) Create(ctx context.Context, sku string, qty int64, timeout, remindBefore time.Duration) (hourglass.Order, error) {
	o, _, err := t.store.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "bench", Items: []hourglass.Item{{SKU: sku, Quantity: qty}}, Timeout: timeout, RemindBefore: remindBefore})
	return o, err
}

// Expiring implements Target from the order's stored history.
func (t *storeTarget) Expiring(ctx context.Context, id int64) ([]time.Time, error) {
	if t.history == nil {
		return nil, fmt.Errorf("order %d: this target reads no histories", id)
	}
	h, err := t.history.History(ctx, hourglass.HistoryParams{Subject: id})
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for _, e := range h.Events {
		if e.Type == hourglass.EventOrderExpiring {
			out = append(out, e.CreatedAt)
		}
	}
	return out, nil
}

func (t *storeTarget) Pay(ctx context.Context, id int64) (bool, error) {
	_, err := t.store.PayOrder(ctx, id, fmt.Sprint("pay-", id))
	if hourglass.ErrorCode(err) == hourglass.CodeOrderNotPayable {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

func (t *storeTarget) Order(ctx context.Context, id int64) (hourglass.Order, error) {
	return t.store.Order(ctx, id)
}

func (t *storeTarget) Product(ctx context.Context, sku string) (hourglass.Product, error) {
	return t.store.Product(ctx, sku)
}

func (t *storeTarget) PutProduct(ctx context.Context, p hourglass.Product) error {
	_, err := t.store.PutProduct(ctx, p)
	return err
}

// counter is the engine observer of a run.
type counter struct {
	mu           sync.Mutex
	swept, noops int
	// fired counts the fires the engine reported per timer id; timersSwept
	// those the sweeper found.
	fired       map[int64]int
	timersSwept int
}

// Fired implements engine.TimerObserver.
func (c *counter) Fired(t hourglass.FiredTimer, swept bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fired == nil {
		c.fired = map[int64]int{}
	}
	c.fired[t.ID]++
	if swept {
		c.timersSwept++
	}
}

// firedCount returns how many times the engine reported timer id fired.
func (c *counter) firedCount(id int64) int { c.mu.Lock(); defer c.mu.Unlock(); return c.fired[id] }
func (c *counter) timersSweptCount() int   { c.mu.Lock(); defer c.mu.Unlock(); return c.timersSwept }

func (c *counter) Closed(_ hourglass.ClosedOrder, swept bool) {
	if swept {
		c.mu.Lock()
		c.swept++
		c.mu.Unlock()
	}
}
func (c *counter) Stale(n int)            { c.mu.Lock(); c.noops += n; c.mu.Unlock() }
func (c *counter) CloseFailed(int, error) {}
func (c *counter) Swept(int)              {}
func (c *counter) SchedulerFailed(error)  {}
func (c *counter) sweptCount() int        { c.mu.Lock(); defer c.mu.Unlock(); return c.swept }
func (c *counter) noopCount() int         { c.mu.Lock(); defer c.mu.Unlock(); return c.noops }
