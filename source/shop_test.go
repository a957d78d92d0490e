package source_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/source"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// shops returns, per server, a store and the shop's schema beside it:
// PostgreSQL (schema shop beside schema hourglass, one database) and
// MariaDB (two databases of one server).
func shops() map[string]func(t *testing.T) (hourglasstest.SourceDB, hourglasstest.Shop) {
	return map[string]func(t *testing.T) (hourglasstest.SourceDB, hourglasstest.Shop){
		"postgres": func(t *testing.T) (hourglasstest.SourceDB, hourglasstest.Shop) {
			u := pgtest.NewDatabase(t)
			s, err := postgres.Open(context.Background(), postgres.Config{URL: u, Schema: "hourglass", MaxConns: 16})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			db, err := sql.Open("pgx", u)
			if err != nil {
				t.Fatal(err)
			}
			db.SetMaxOpenConns(32)
			t.Cleanup(func() { db.Close() })
			return s, hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true, Events: "hourglass.events"}
		},
		"mysql": func(t *testing.T) (hourglasstest.SourceDB, hourglasstest.Shop) {
			storeURL := mytest.NewDatabase(t)
			s, err := mysql.Open(context.Background(), mysql.Config{URL: storeURL})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			shopURL := mytest.NewDatabase(t)
			u, err := url.Parse(shopURL)
			if err != nil {
				t.Fatal(err)
			}
			db := mytest.Admin(t, shopURL)
			db.SetMaxOpenConns(32)
			su, err := url.Parse(storeURL)
			if err != nil {
				t.Fatal(err)
			}
			return s, hourglasstest.Shop{DB: db, Schema: strings.TrimPrefix(u.Path, "/"), Events: strings.TrimPrefix(su.Path, "/") + ".events"}
		},
	}
}

// observer records what the runner reports.
type observer struct {
	mu                                               sync.Mutex
	lateness                                         []time.Duration
	noops, guardErrors, failed, recovered, lockWaits int
	bad                                              map[string]int // by reason
	reminders                                        map[string]int // by outcome
}

func (o *observer) SourceClosed(_ string, d time.Duration) {
	o.mu.Lock()
	o.lateness = append(o.lateness, d)
	o.mu.Unlock()
}
func (o *observer) SourceNoop(string)       { o.mu.Lock(); o.noops++; o.mu.Unlock() }
func (o *observer) SourceGuardError(string) { o.mu.Lock(); o.guardErrors++; o.mu.Unlock() }
func (o *observer) SourceFailed(string)     { o.mu.Lock(); o.failed++; o.mu.Unlock() }
func (o *observer) SourceRecovered(_ string, n int) {
	o.mu.Lock()
	o.recovered += n
	o.mu.Unlock()
}
func (o *observer) SourceHeld(string, int) {}
func (o *observer) SourceBadRows(_, reason string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bad == nil {
		o.bad = map[string]int{}
	}
	o.bad[reason] += n
}
func (o *observer) SourceLockWaits(_ string, n int) {
	o.mu.Lock()
	o.lockWaits += n
	o.mu.Unlock()
}

func (o *observer) SourceReminders(_, outcome string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reminders == nil {
		o.reminders = map[string]int{}
	}
	o.reminders[outcome] += n
}

// reminded returns the reminders counted sent and skipped.
func (o *observer) reminded() (sent, skipped int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reminders["sent"], o.reminders["skipped"]
}

func (o *observer) quantile(q float64) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.lateness) == 0 {
		return 0
	}
	l := slices.Clone(o.lateness)
	slices.Sort(l)
	return l[min(int(q*float64(len(l))), len(l)-1)]
}

func run(t *testing.T, db hourglass.SourceStore, src hourglass.Source, obs *observer) {
	t.Helper()
	runWith(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: obs, SweepInterval: time.Second})
}

// runWith opens and runs the sources of cfg until the test ends.
func runWith(t *testing.T, cfg source.Config) *source.Runner {
	t.Helper()
	r, _, err := source.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the sources were not ready within 10 s")
	}
	return r
}

// TestShopOrders is the source documents' shop on each server: orders
// inserted straight into the shop's table by its own SQL over 10 s, 30%
// paid by the shop's conditional update (some 5 ms either side of the
// deadline), some extended by the shop. Every unpaid order closes once,
// at or after its deadline (the extended ones at the new one), its stock
// released once, with one source.closed event; none is both paid and
// closed, and none is left to the sweeper.
func TestShopOrders(t *testing.T) {
	testenv.Require(t, testenv.Default, testenv.Full)
	for name, open := range shops() { // one server at a time: each loads both cores
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			const stock = 1_000_000
			skus := []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P"}
			for _, sku := range skus {
				shop.PutStock(t, sku, stock)
			}
			obs := &observer{}
			run(t, db, shop.Source("shop_orders"), obs)

			// 200 a second for 10 s; under -race or -short, the same rate
			// for 2 s (the full size runs in .ci/run without -race).
			n, span := 2000, 10*time.Second
			if testing.Short() || raceEnabled {
				n, span = 400, 2*time.Second
			}
			type order struct {
				id       int64
				deadline time.Time
				paid     bool // the shop's pay won
				extended bool
			}
			var (
				mu     sync.Mutex
				orders []*order
				wg     sync.WaitGroup
			)
			start := time.Now()
			for i := range n {
				// Each due 1-2 s after it is created.
				at := start.Add(time.Duration(i) * span / time.Duration(n))
				testenv.Until(t.Context(), at)
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := time.Second + time.Duration(rand.IntN(1000))*time.Millisecond
					began := time.Now()
					id, err := shop.TryOrder(t, "u", in, skus[rand.IntN(len(skus))], 1)
					if err != nil {
						t.Error(err)
						return
					}
					o := &order{id: id, deadline: began.Add(in)}
					mu.Lock()
					orders = append(orders, o)
					mu.Unlock()
					switch r := rand.IntN(100); {
					case r < 20: // paid well before the deadline
						testenv.Until(t.Context(), time.Now().Add(in/2))
					case r < 25: // 5 ms before it
						testenv.Until(t.Context(), o.deadline.Add(-5*time.Millisecond))
					case r < 30: // 5 ms after it: refused by the shop's own update
						testenv.Until(t.Context(), o.deadline.Add(5*time.Millisecond))
					case r < 35: // extended by the shop: closed 1 s later
						testenv.Until(t.Context(), time.Now().Add(in/2))
						if shop.Exec(t, "UPDATE "+shop.T("orders")+" SET expire_at = expire_at + "+interval(shop, time.Second)+" WHERE id = ? AND status = 'UNPAID'", id) == 1 {
							o.extended = true
						}
						return
					default:
						return
					}
					ok, err := shop.Pay(t, id)
					if err != nil {
						t.Error(err)
					}
					o.paid = ok
				}()
			}
			wg.Wait()
			testenv.EventuallyEvery(t, 30*time.Second, 50*time.Millisecond, "every unpaid order closed", func() bool {
				var left int
				shop.DB.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+shop.T("orders")+" WHERE status = 'UNPAID'").Scan(&left)
				return left == 0
			})

			paid := 0
			for _, o := range orders {
				st := shop.Status(t, o.id)
				evs, err := db.OrderEvents(t.Context(), hourglass.SourceEventOrderID("shop_orders", o.id))
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case o.paid:
					paid++
					if st != "PAID" || len(evs) != 0 {
						t.Errorf("order %d: paid by the shop, now %s with %d close events", o.id, st, len(evs))
					}
				case st != "CLOSED" || len(evs) != 1:
					t.Errorf("order %d: unpaid, now %s with %d close events; want CLOSED and one", o.id, st, len(evs))
				default:
					var body struct {
						Deadline, ClosedAt time.Time `json:"-"`
					}
					var raw struct {
						Deadline string `json:"deadline"`
						ClosedAt string `json:"closed_at"`
					}
					if err := json.Unmarshal(evs[0].Body, &raw); err != nil {
						t.Fatal(err)
					}
					body.Deadline, _ = time.Parse(time.RFC3339, raw.Deadline)
					body.ClosedAt, _ = time.Parse(time.RFC3339, raw.ClosedAt)
					if body.ClosedAt.Before(body.Deadline) {
						t.Errorf("order %d closed at %s, before its deadline %s", o.id, raw.ClosedAt, raw.Deadline)
					}
					if o.extended && body.Deadline.Sub(o.deadline) < 900*time.Millisecond {
						t.Errorf("order %d was extended by 1 s; closed for the deadline %s (first %s)", o.id, raw.Deadline, o.deadline.UTC().Format(hourglass.TimeFormat))
					}
				}
			}
			avail, reserved := 0, 0
			for _, sku := range skus {
				a, r := shop.Stock(t, sku)
				avail, reserved = avail+a, reserved+r
			}
			if want := len(skus)*stock - paid; avail != want || reserved != 0 {
				t.Errorf("stock %d available, %d reserved; want %d and 0 (each close released once)", avail, reserved, want)
			}
			obs.mu.Lock()
			closed, recovered, guard, failed := len(obs.lateness), obs.recovered, obs.guardErrors, obs.failed
			obs.mu.Unlock()
			if closed != len(orders)-paid || recovered != 0 || guard != 0 || failed != 0 {
				t.Errorf("%d closes (want %d), %d swept, %d guard errors, %d failed statements", closed, len(orders)-paid, recovered, guard, failed)
			}
			t.Logf("%s: %d orders, %d paid, %d closed; close lateness p50 %s p99 %s max %s", name, len(orders), paid, closed,
				obs.quantile(.5), obs.quantile(.99), obs.quantile(1))
		})
	}
}

// interval is d as the shop's SQL adds it to a timestamp.
func interval(shop hourglasstest.Shop, d time.Duration) string {
	if shop.Postgres {
		return "interval '" + d.String() + "'"
	}
	return "INTERVAL " + strings.TrimSuffix(d.String(), "s") + " SECOND"
}

// TestShopBurst: 20,000 rows due in the same second, inserted by one
// statement of the shop's 3 s before, are all closed within 10 s of it,
// none left to the sweeper, each released once.
func TestShopBurst(t *testing.T) {
	testenv.Require(t, testenv.Default, testenv.Full)
	n := 20000
	if testing.Short() || raceEnabled {
		n = 2000
	}
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", n)
			obs := &observer{}
			run(t, db, shop.Source("shop_orders"), obs)
			due := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
			ts := due.UTC().Format("2006-01-02 15:04:05")
			if shop.Postgres {
				shop.Exec(t, "INSERT INTO "+shop.T("orders")+" (user_id, status, expire_at) SELECT 'u', 'UNPAID', TIMESTAMP '"+ts+"' + (g % 1000) * interval '1 millisecond' FROM generate_series(1, ?) g", n)
			} else {
				digit := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
				shop.Exec(t, "INSERT INTO "+shop.T("orders")+" (user_id, status, expire_at) SELECT 'u', 'UNPAID', TIMESTAMP '"+ts+"' + INTERVAL (i % 1000) * 1000 MICROSECOND FROM "+
					"(SELECT a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS i FROM "+digit+" a, "+digit+" b, "+digit+" c, "+digit+" e, "+digit+" f) x WHERE i < ?", n)
			}
			shop.Exec(t, "INSERT INTO "+shop.T("order_items")+" (order_id, sku, qty) SELECT id, 'A', 1 FROM "+shop.T("orders"))
			shop.Exec(t, "UPDATE "+shop.T("stock")+" SET available = 0, reserved = ? WHERE sku = 'A'", n)
			// Counted every 50 ms: a COUNT of up to 20,000 rows every 5 ms
			// (Eventually's poll) took a core of the database from the
			// closes it measures.
			testenv.EventuallyEvery(t, time.Until(due)+30*time.Second, 50*time.Millisecond, "every row of the burst closed", func() bool {
				var left int
				shop.DB.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+shop.T("orders")+" WHERE status = 'UNPAID'").Scan(&left)
				return left == 0
			})
			took := time.Since(due)
			obs.mu.Lock()
			closed, recovered := len(obs.lateness), obs.recovered
			obs.mu.Unlock()
			if a, r := shop.Stock(t, "A"); a != n || r != 0 {
				t.Errorf("stock %d/%d; want %d/0", a, r, n)
			}
			// Closed once each, by the database's record: one source.closed
			// event per row.
			var once, events int
			if err := shop.DB.QueryRowContext(t.Context(), "SELECT COUNT(DISTINCT order_id), COUNT(*) FROM "+shop.Events+" WHERE type = 'source.closed'").Scan(&once, &events); err != nil {
				t.Fatal(err)
			}
			if events != once {
				t.Errorf("%d source.closed events for %d rows: some row closed twice", events, once)
			}
			if once != n || recovered != 0 || took > 10*time.Second && !raceEnabled {
				t.Errorf("%d of %d rows closed once, %d by the sweeper, the last %s after the burst's second; want all, none, within 10 s", once, n, recovered, took)
			}
			if closed != n {
				// Seen once in a CI run on MariaDB (19,520 of 20,000 with every
				// row closed once): a close the runner did not see succeed.
				t.Logf("the runner counted %d closes of %d", closed, n)
			}
			t.Logf("%s: %d rows due in one second closed %s after it began; lateness p50 %s p99 %s", name, n, took.Round(time.Millisecond), obs.quantile(.5), obs.quantile(.99))
		})
	}
}

// TestGuardMisconfigured: a guard that changes several rows is rolled
// back, the rows stay pending, and the runner reports the source as
// misconfigured (the source_misconfigured alert) and counts it.
func TestGuardMisconfigured(t *testing.T) {
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 10)
			src := shop.Source("shop_orders")
			src.Close = []string{"UPDATE " + shop.T("orders") + " SET status = 'CLOSED' WHERE status = 'UNPAID' AND id BETWEEN :key - 1 AND :key + 1"}
			obs := &observer{}
			r := runWith(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: obs})
			a := shop.Order(t, "u", 100*time.Millisecond, "A", 1)
			b := shop.Order(t, "u", 100*time.Millisecond, "A", 1)
			testenv.Eventually(t, 10*time.Second, "the source reported misconfigured", func() bool {
				return slices.Contains(r.Misconfigured(time.Now()), "shop_orders")
			})
			if shop.Status(t, a) != "UNPAID" || shop.Status(t, b) != "UNPAID" {
				t.Error("a guard that matched several rows changed them")
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.guardErrors == 0 || len(obs.lateness) != 0 {
				t.Errorf("%d guard errors, %d closes; want some and none", obs.guardErrors, len(obs.lateness))
			}
		})
	}
}
