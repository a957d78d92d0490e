package processtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// sourceShop makes a database for hourglass and the shop's schema beside
// it (PostgreSQL: schema shop of the same database; MariaDB: another
// database of the server), and the --sources file naming its orders table.
func sourceShop(t *testing.T, kind string) (dbURL string, shop hourglasstest.Shop, sourcesFile string) {
	t.Helper()
	switch kind {
	case store.KindPostgres:
		dbURL = pgtest.NewDatabase(t)
		db, err := sql.Open("pgx", dbURL)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(16)
		t.Cleanup(func() { db.Close() })
		shop = hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
	default:
		dbURL = mytest.NewDatabase(t)
		shopURL := mytest.NewDatabase(t)
		u, err := url.Parse(shopURL)
		if err != nil {
			t.Fatal(err)
		}
		db := mytest.Admin(t, shopURL)
		db.SetMaxOpenConns(16)
		shop = hourglasstest.Shop{DB: db, Schema: strings.TrimPrefix(u.Path, "/")}
	}
	shop.Create(t, true)
	src := shop.Source("shop_orders")
	b, err := yaml.Marshal(map[string]any{"sources": []map[string]any{{
		"name": src.Name, "table": src.Table, "key": src.Key, "deadline": src.Deadline, "pending": src.Pending, "close": src.Close, "lock": src.Lock,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	sourcesFile = filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sourcesFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dbURL, shop, sourcesFile
}

// TestSourcesKill (issue #22): the shop's own orders table closed by one
// node and by three. The shop inserts orders straight into its table for
// 8 s (due 1-3 s later), pays 30 % with its own conditional update; one
// node is SIGKILLed 3 s in and restarted after its leases expired. Every
// unpaid order is closed once (one source.closed event), never before its
// deadline, its stock released once; none paid and closed; and the rows of
// the killed node that fell due while it was down are closed within
// --lease-ttl + 1 s (three nodes) or within 5 s of the restart (one node).
// The nodes' delay mechanism (the wheel, or Redis) times hourglass's own
// orders; sources time their rows in memory either way. The Redis case is
// in the Brokers tier, the others in the Processes tier. The one-node cases
// run in parallel with each other, after the three-node ones: their bound
// counts from the restart, with 5 s to spare, where the three nodes' is
// the lease TTL + 1 s.
func TestSourcesKill(t *testing.T) {
	testenv.Require(t, testenv.Processes, testenv.Brokers)
	type variant struct {
		kind  string
		n     int
		delay string // the nodes' --delay: sources time their rows in memory whichever it is
	}
	var variants []variant
	for _, kind := range sharedStores {
		variants = append(variants, variant{kind, 1, "wheel"}, variant{kind, 3, "wheel"})
	}
	variants = append(variants, variant{store.KindPostgres, 3, "redis"})
	for _, v := range variants {
		kind, n := v.kind, v.n
		t.Run(fmt.Sprintf("%s/%d_nodes/%s", kind, n, v.delay), func(t *testing.T) {
			if v.delay == "wheel" {
				testenv.Require(t, testenv.Processes)
			} else {
				testenv.Require(t, testenv.Brokers)
			}
			if n == 1 {
				t.Parallel()
			}
			const ttl = 2 * time.Second
			dbURL, shop, file := sourceShop(t, kind)
			skus := []string{"A", "B", "C", "D", "E", "F", "G", "H"}
			const stock = 100_000
			for _, sku := range skus {
				shop.PutStock(t, sku, stock)
			}
			args := []string{"--sources", file, "--delay", v.delay}
			if v.delay != "wheel" {
				args = append(args, "--delay-namespace", fmt.Sprintf("hgt-sources-%d", time.Now().UnixNano()%1e9))
			}
			s := startCluster(t, []string{dbURL}, n, ttl, args...)
			c := s.cluster

			type order struct {
				id       int64
				deadline time.Time
				paid     bool
			}
			var (
				mu     sync.Mutex
				orders []*order
				wg     sync.WaitGroup
			)
			start := time.Now()
			const total = 800 // 100 a second for 8 s
			victim := c.Node(n - 1)
			var killedAt, restartedAt time.Time
			killDone := make(chan struct{})
			go func() {
				defer close(killDone)
				if !testenv.Until(t.Context(), start.Add(3*time.Second)) {
					return
				}
				killedAt = time.Now()
				if err := victim.Kill(); err != nil {
					t.Error(err)
					return
				}
				wait := time.Second
				if n > 1 {
					wait = ttl + 2*time.Second
				}
				if !testenv.Until(t.Context(), time.Now().Add(wait)) { // down while its rows fall due
					return
				}
				if err := victim.Restart(context.Background(), false); err != nil {
					t.Error(err)
					return
				}
				restartedAt = victim.ReadyAt()
			}()
			for i := range total {
				if !testenv.Until(t.Context(), start.Add(time.Duration(i)*8*time.Second/total)) {
					t.Fatal("the test ended during the shop's inserts")
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := time.Second + time.Duration(rand.IntN(2000))*time.Millisecond
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
					if rand.IntN(100) < 30 {
						if !testenv.Until(t.Context(), time.Now().Add(in/2)) {
							return
						}
						ok, err := shop.Pay(t, id)
						if err != nil {
							t.Error(err)
						}
						o.paid = ok
					}
				}()
			}
			wg.Wait()
			<-killDone
			// A row left UNPAID fails the verdict below, paid or not:
			// 30 s after the last insert, fail here.
			var logged time.Time
			testenv.EventuallyEvery(t, 30*time.Second, 100*time.Millisecond, "no shop order left UNPAID", func() bool {
				var left int
				err := shop.DB.QueryRow("SELECT COUNT(*) FROM " + shop.T("orders") + " WHERE status = 'UNPAID'").Scan(&left)
				if (err != nil || left > 0) && time.Since(logged) >= time.Second { // the last line is the count on a failure
					logged = time.Now()
					t.Logf("%d shop orders UNPAID yet (%v)", left, err)
				}
				return err == nil && left == 0
			})

			// The verdict, from the shop's tables and hourglass's events.
			events := sourceEvents(t, shop, kind, dbURL)
			paid, bad := 0, 0
			var downLate []time.Duration
			fail := func(format string, a ...any) {
				t.Helper()
				if bad++; bad <= 20 {
					t.Errorf(format, a...)
				}
			}
			for _, o := range orders {
				st := shop.Status(t, o.id)
				evs := events[hourglass.SourceEventOrderID("shop_orders", o.id)]
				if o.paid {
					paid++
					if st != "PAID" || len(evs) != 0 {
						fail("order %d: paid by the shop, now %s with %d close events", o.id, st, len(evs))
					}
					continue
				}
				if st != "CLOSED" || len(evs) != 1 {
					fail("order %d: unpaid, now %s with %d close events; want CLOSED and one", o.id, st, len(evs))
					continue
				}
				e := evs[0]
				if e.ClosedAt.Before(e.Deadline) {
					fail("order %d closed at %s, before its deadline %s", o.id, e.ClosedAt, e.Deadline)
				}
				if e.Deadline.After(killedAt) && e.Deadline.Before(restartedAt) {
					downLate = append(downLate, e.ClosedAt.Sub(e.Deadline))
				}
				bound := ttl + time.Second
				if n == 1 {
					bound = max(restartedAt.Sub(e.Deadline), 0) + 5*time.Second
				}
				if late := e.ClosedAt.Sub(e.Deadline); late > bound+500*time.Millisecond {
					fail("order %d closed %s after its deadline; bound %s", o.id, late, bound)
				}
			}
			avail, reserved := 0, 0
			for _, sku := range skus {
				a, r := shop.Stock(t, sku)
				avail, reserved = avail+a, reserved+r
			}
			if want := len(skus)*stock - paid; avail != want || reserved != 0 {
				t.Errorf("stock: %d available, %d reserved; want %d and 0", avail, reserved, want)
			}
			slices.Sort(downLate)
			if len(downLate) == 0 {
				t.Errorf("no row fell due while the node was down: the test's timing is off")
			} else {
				t.Logf("%d orders, %d paid; killed at %s, ready again at %s; %d rows due while it was down closed %s late at the median, %s at most",
					len(orders), paid, killedAt.Sub(start).Round(time.Millisecond), restartedAt.Sub(start).Round(time.Millisecond),
					len(downLate), downLate[len(downLate)/2], downLate[len(downLate)-1])
			}
		})
	}
}

// sourceEvent is a source.closed event's times.
type sourceEvent struct{ Deadline, ClosedAt time.Time }

// sourceEvents reads hourglass's source.closed events by order_id.
func sourceEvents(t *testing.T, shop hourglasstest.Shop, kind, dbURL string) map[int64][]sourceEvent {
	t.Helper()
	table := "events"
	if kind == store.KindMySQL {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		table = strings.TrimPrefix(u.Path, "/") + ".events"
	}
	rows, err := shop.DB.Query("SELECT order_id, body FROM " + table + " WHERE type = 'source.closed'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64][]sourceEvent{}
	for rows.Next() {
		var (
			id   int64
			body []byte
		)
		if err := rows.Scan(&id, &body); err != nil {
			t.Fatal(err)
		}
		var b struct {
			Deadline string `json:"deadline"`
			ClosedAt string `json:"closed_at"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatal(err)
		}
		var e sourceEvent
		e.Deadline, _ = time.Parse(time.RFC3339, b.Deadline)
		e.ClosedAt, _ = time.Parse(time.RFC3339, b.ClosedAt)
		out[id] = append(out[id], e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
