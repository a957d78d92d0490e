package node_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestNodeSources: a node with a source on PostgreSQL closes the shop's
// row and shows it on the dashboard's Sources card and in the metrics,
// with the source_misconfigured rule among the alerts; a node with a
// source on SQLite is refused at New with one line.
func TestNodeSources(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url)
	shop := hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	src := shop.Source("shop_orders")

	if _, err := node.New(context.Background(), node.Config{Addr: "127.0.0.1:0", Store: store.Options{DataDir: t.TempDir()},
		Sources: []hourglass.Source{src}, Logger: slog.New(slog.DiscardHandler)}); err == nil || !strings.Contains(err.Error(), "--sources needs PostgreSQL or MySQL") {
		t.Errorf("a source on SQLite: %v; want refused", err)
	}

	n, err := node.New(context.Background(), node.Config{Addr: "127.0.0.1:0", Store: store.Options{URL: url, Schema: "hourglass"},
		Sources: []hourglass.Source{src}, TimerMax: 1000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	// A row inserted before the source reads its largest key is loaded by
	// its first window, one after it is tailed: no wait is needed.
	id := shop.Order(t, "u", 200*time.Millisecond, "A", 2)
	base := "http://" + n.Addr().String()
	get := func(path string) []byte {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	var snap struct {
		Sources []struct {
			Name   string `json:"name"`
			Closes int64  `json:"closes"`
		} `json:"sources"`
		Alerts []struct {
			Rule string `json:"rule"`
		} `json:"alerts"`
	}
	testenv.Eventually(t, 10*time.Second, "the dashboard shows the source's close", func() bool {
		if err := json.Unmarshal(get("/v1/dashboard"), &snap); err != nil {
			t.Fatal(err)
		}
		return len(snap.Sources) == 1 && snap.Sources[0].Name == "shop_orders" && snap.Sources[0].Closes == 1
	})
	if st := shop.Status(t, id); st != "CLOSED" {
		t.Errorf("order %d is %s", id, st)
	}
	rules := ""
	for _, a := range snap.Alerts {
		rules += a.Rule + " "
	}
	if !strings.Contains(rules, "source_misconfigured") {
		t.Errorf("alert rules %q; want source_misconfigured", rules)
	}
	if m := string(get("/metrics")); !strings.Contains(m, `hourglass_source_closes_total{source="shop_orders"} 1`) {
		t.Errorf("metrics lack the source's close")
	}
	// Counted from zero (TestSourceMetricsStartAtZero): the series is
	// there whether or not a close met a lock meanwhile (under -race on a
	// loaded CI machine one did).
	if m := string(get("/metrics")); !strings.Contains(m, `hourglass_source_lock_waits_total{source="shop_orders"} `) {
		t.Errorf("metrics lack the source's lock waits")
	}
	if !strings.Contains(rules, "source_row_blocked") {
		t.Errorf("alert rules %q; want source_row_blocked", rules)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
