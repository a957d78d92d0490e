package node_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// BenchmarkSourcesBesideOrders measures a source (the shop's own orders
// table, --sources) beside hourglass's own orders, on one node and one
// database in the same run:
//   - steady: b.N of each created over 10 s (due 1-2 s after), hourglass's
//     through its store, the shop's by its own SQL; lateness from deadline
//     to the database's close time, p50 and p99 of each;
//   - burst: b.N of each due within a moment (the shop's rows all in the
//     same millisecond; hourglass's as fast as they can be created, 5 s
//     ahead); closes/s from the earliest deadline to the last close.
//
// HOURGLASS_TEST_STORE picks postgres (default) or mysql.
//
//	go test -run '^$' -bench SourcesBesideOrders -benchtime 2000x ./node/
//	HOURGLASS_TEST_STORE=mysql go test -run '^$' -bench SourcesBesideOrders -benchtime 2000x ./node/
func BenchmarkSourcesBesideOrders(b *testing.B) {
	kind := testenv.Store(b, store.KindPostgres)
	var (
		dbURL, schema, events string
		shop                  hourglasstest.Shop
	)
	switch kind {
	case store.KindPostgres:
		dbURL, schema, events = pgtest.NewDatabase(b), "hourglass", "hourglass.events"
		db, err := sql.Open("pgx", dbURL)
		if err != nil {
			b.Fatal(err)
		}
		db.SetMaxOpenConns(32)
		b.Cleanup(func() { db.Close() })
		shop = hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
	case store.KindMySQL:
		dbURL = mytest.NewDatabase(b)
		u, err := url.Parse(dbURL)
		if err != nil {
			b.Fatal(err)
		}
		events = strings.TrimPrefix(u.Path, "/") + ".events"
		shopURL := mytest.NewDatabase(b)
		su, _ := url.Parse(shopURL)
		db := mytest.Admin(b, shopURL)
		db.SetMaxOpenConns(32)
		shop = hourglasstest.Shop{DB: db, Schema: strings.TrimPrefix(su.Path, "/")}
	default:
		b.Skipf("HOURGLASS_TEST_STORE=%s: want postgres or mysql", kind)
	}
	shop.Create(b, true)
	skus := []string{"A", "B", "C", "D", "E", "F", "G", "H"}
	for _, sku := range skus {
		shop.PutStock(b, sku, 10_000_000)
	}
	n, err := node.New(context.Background(), node.Config{
		Addr: "127.0.0.1:0", Store: store.Options{URL: dbURL, Schema: schema},
		Sources: []hourglass.Source{shop.Source("shop_orders")}, TimerMax: 1000, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { stop(); <-done }()
	for _, sku := range skus {
		if _, err := n.Store.PutProduct(ctx, hourglass.Product{SKU: sku, Name: sku, Available: 10_000_000}); err != nil {
			b.Fatal(err)
		}
	}
	testenv.EventuallyEvery(b, 30*time.Second, 20*time.Millisecond, "the node's /readyz answering 200", func() bool {
		resp, err := http.Get("http://" + n.Addr().String() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	var (
		mu            sync.Mutex
		own, shopKeys []int64
	)
	createOwn := func(timeout time.Duration) {
		o, _, err := n.Store.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: skus[rand.IntN(len(skus))], Quantity: 1}}, Timeout: timeout})
		if err != nil {
			b.Error(err)
			return
		}
		mu.Lock()
		own = append(own, o.ID)
		mu.Unlock()
	}
	b.ResetTimer()

	// Steady: both at b.N over 10 s.
	var wg sync.WaitGroup
	start := time.Now()
	for i := range b.N {
		testenv.Until(ctx, start.Add(time.Duration(i)*10*time.Second/time.Duration(b.N)))
		in := time.Second + time.Duration(rand.IntN(1000))*time.Millisecond
		wg.Add(2)
		go func() { defer wg.Done(); createOwn(in) }()
		go func() {
			defer wg.Done()
			id, err := shop.TryOrder(b, "u", in, skus[rand.IntN(len(skus))], 1)
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			shopKeys = append(shopKeys, id)
			mu.Unlock()
		}()
	}
	wg.Wait()
	ownLate, shopLate := waitClosed(b, n, shop, events, own, shopKeys)
	if resp, err := http.Get("http://" + n.Addr().String() + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "hourglass_source_sweeper") || strings.HasPrefix(line, "hourglass_sweeper_recovered") {
				b.Log(line)
			}
		}
	}
	b.ReportMetric(ms(ownLate, 0.5), "own-p50-ms")
	b.ReportMetric(ms(ownLate, 0.99), "own-p99-ms")
	b.ReportMetric(ms(shopLate, 0.5), "source-p50-ms")
	b.ReportMetric(ms(shopLate, 0.99), "source-p99-ms")

	// Burst: b.N of each due within a moment.
	own, shopKeys = nil, nil
	due := time.Now().Add(5 * time.Second)
	sem := make(chan struct{}, 32)
	for range b.N {
		sem <- struct{}{}
		wg.Add(1)
		go func() { defer func() { <-sem; wg.Done() }(); createOwn(time.Until(due)) }()
	}
	wg.Wait()
	firstKey := shopMax(b, shop)
	ts := due.UTC().Format("2006-01-02 15:04:05.000")
	if shop.Postgres {
		shop.Exec(b, "INSERT INTO "+shop.T("orders")+" (user_id, status, expire_at) SELECT 'u', 'UNPAID', TIMESTAMP '"+ts+"' FROM generate_series(1, ?)", b.N)
	} else {
		digit := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
		shop.Exec(b, "INSERT INTO "+shop.T("orders")+" (user_id, status, expire_at) SELECT 'u', 'UNPAID', TIMESTAMP '"+ts+"' FROM "+
			"(SELECT a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS i FROM "+digit+" a, "+digit+" b, "+digit+" c, "+digit+" e, "+digit+" f) x WHERE i < ?", b.N)
	}
	rows, err := shop.DB.Query(shop.Bind("SELECT id FROM "+shop.T("orders")+" WHERE id > ?"), firstKey)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		shopKeys = append(shopKeys, id)
	}
	rows.Close()
	shop.Exec(b, "INSERT INTO "+shop.T("order_items")+" (order_id, sku, qty) SELECT id, 'A', 1 FROM "+shop.T("orders")+" WHERE id > ?", firstKey)
	shop.Exec(b, "UPDATE "+shop.T("stock")+" SET available = available - ?, reserved = reserved + ? WHERE sku = 'A'", b.N, b.N)
	ownLate, shopLate = waitClosed(b, n, shop, events, own, shopKeys)
	b.ReportMetric(float64(b.N)/burstSpan(ownLate).Seconds(), "own-burst-closes/s")
	b.ReportMetric(float64(b.N)/burstSpan(shopLate).Seconds(), "source-burst-closes/s")
	b.StopTimer()
}

// closing is one close: its deadline and the database's close time.
type closing struct{ deadline, closedAt time.Time }

// waitClosed waits until every own order and shop row is closed (or paid:
// none here) and returns their closes.
func waitClosed(b *testing.B, n *node.Node, shop hourglasstest.Shop, events string, own, shopKeys []int64) (ownC, shopC []closing) {
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range own {
		testenv.EventuallyEvery(b, time.Until(deadline), 20*time.Millisecond, fmt.Sprintf("order %d closed", id), func() bool {
			o, err := n.Store.Order(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if o.Status != hourglass.StateClosed {
				return false
			}
			ownC = append(ownC, closing{o.Deadline, o.ClosedAt})
			return true
		})
	}
	want := map[int64]bool{}
	for _, k := range shopKeys {
		want[hourglass.SourceEventOrderID("shop_orders", k)] = true
	}
	waited := false
	defer func() {
		if !waited { // EventuallyEvery failed the benchmark: say how far it got
			b.Logf("%d of %d shop rows closed", len(shopC), len(shopKeys))
		}
	}()
	testenv.EventuallyEvery(b, time.Until(deadline), 100*time.Millisecond, fmt.Sprintf("all %d shop rows closed", len(shopKeys)), func() bool {
		shopC = shopC[:0]
		rows, err := shop.DB.Query("SELECT order_id, body FROM " + events + " WHERE type = 'source.closed'")
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var (
				id   int64
				body []byte
			)
			rows.Scan(&id, &body)
			if !want[id] {
				continue
			}
			var e struct {
				Deadline time.Time `json:"deadline"`
				ClosedAt time.Time `json:"closed_at"`
			}
			json.Unmarshal(body, &e)
			shopC = append(shopC, closing{e.Deadline, e.ClosedAt})
		}
		rows.Close()
		return len(shopC) >= len(shopKeys)
	})
	waited = true
	return ownC, shopC
}

// ms is the q quantile of the closes' lateness, in milliseconds.
func ms(c []closing, q float64) float64 {
	l := make([]time.Duration, len(c))
	for i, x := range c {
		l[i] = x.closedAt.Sub(x.deadline)
	}
	slices.Sort(l)
	return float64(l[min(int(q*float64(len(l))), len(l)-1)].Microseconds()) / 1000
}

// burstSpan is from the earliest deadline to the last close.
func burstSpan(c []closing) time.Duration {
	first, last := c[0].deadline, c[0].closedAt
	for _, x := range c {
		if x.deadline.Before(first) {
			first = x.deadline
		}
		if x.closedAt.After(last) {
			last = x.closedAt
		}
	}
	return max(last.Sub(first), time.Millisecond)
}

func shopMax(b *testing.B, shop hourglasstest.Shop) int64 {
	var k int64
	if err := shop.DB.QueryRow("SELECT COALESCE(MAX(id), 0) FROM " + shop.T("orders")).Scan(&k); err != nil {
		b.Fatal(err)
	}
	return k
}
