package node_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestSourceMetricsStartAtZero: a node with a source shows each of the
// source's counters on /metrics at 0 before anything counted, on
// PostgreSQL and MariaDB, so that a rate or an alert has a series.
func TestSourceMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{store.KindPostgres, store.KindMySQL} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var dbURL, schema string
			var shop hourglasstest.Shop
			if kind == store.KindPostgres {
				dbURL, schema = pgtest.NewDatabase(t), "hourglass"
				shop = hourglasstest.Shop{DB: pgtest.Open(t, dbURL), Schema: "shop", Postgres: true}
			} else {
				dbURL = mytest.NewDatabase(t)
				shopURL := mytest.NewDatabase(t)
				su, err := url.Parse(shopURL)
				if err != nil {
					t.Fatal(err)
				}
				shop = hourglasstest.Shop{DB: mytest.Admin(t, shopURL), Schema: strings.TrimPrefix(su.Path, "/")}
			}
			shop.Create(t, true)
			n, err := node.New(context.Background(), node.Config{
				Addr: "127.0.0.1:0", Store: store.Options{URL: dbURL, Schema: schema},
				Sources: []hourglass.Source{shop.Source("shop_orders")}, TimerMax: 1000, Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			node.RunInTest(t, n)
			resp, err := http.Get("http://" + n.Addr().String() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, name := range []string{
				"hourglass_source_closes_total", "hourglass_source_noops_total", "hourglass_source_guard_errors_total",
				"hourglass_source_close_errors_total", "hourglass_source_sweeper_recovered_total", "hourglass_source_window_rows",
				"hourglass_source_close_lateness_seconds_count", "hourglass_source_lock_waits_total",
			} {
				if want := name + `{source="shop_orders"} 0`; !strings.Contains(string(b), want) {
					t.Errorf("/metrics has no %s", want)
				}
			}
		})
	}
}
