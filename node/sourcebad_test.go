package node_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestNodeSourceBadRows: a node whose source has a pending row with the
// deadline '-infinity' closes the good row beside it, lists the bad one on
// the dashboard's Sources card and at GET /v1/sources/{name}/bad-rows,
// counts it in /metrics (every reason there at zero from the start) and
// fires source_bad_rows.
func TestNodeSourceBadRows(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	shop := hourglasstest.Shop{DB: pgtest.Open(t, url), Schema: "shop", Postgres: true}
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	bad := shop.BadOrder(t, 0, "'-infinity'")
	n, err := node.New(context.Background(), node.Config{Addr: "127.0.0.1:0", Store: store.Options{URL: url, Schema: "hourglass"},
		Sources: []hourglass.Source{shop.Source("shop_orders")}, TimerMax: 1000, Logger: slog.New(slog.DiscardHandler),
		Alerts: node.Alerts{Interval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	good := shop.Order(t, "u", 200*time.Millisecond, "A", 1)
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
			Closes     int64 `json:"closes"`
			BadRows    int64 `json:"bad_rows"`
			BadRowList []struct {
				Key, Deadline, Reason string
			} `json:"bad_row_list"`
		} `json:"sources"`
		Alerts []struct {
			Rule  string `json:"rule"`
			State string `json:"state"`
		} `json:"alerts"`
	}
	firing := func() bool {
		for _, a := range snap.Alerts {
			if a.Rule == "source_bad_rows" {
				return a.State == "firing"
			}
		}
		return false
	}
	testenv.Eventually(t, 10*time.Second, "the dashboard shows the close, the bad row and the alert", func() bool {
		if err := json.Unmarshal(get("/v1/dashboard"), &snap); err != nil {
			t.Fatal(err)
		}
		return len(snap.Sources) == 1 && snap.Sources[0].Closes == 1 && snap.Sources[0].BadRows == 1 && firing()
	})
	if st := shop.Status(t, good); st != "CLOSED" {
		t.Errorf("the good row is %s", st)
	}
	if l := snap.Sources[0].BadRowList; len(l) != 1 || l[0].Key != strconv.FormatInt(bad, 10) || l[0].Deadline != "-infinity" || l[0].Reason != hourglass.BadDeadlineOutOfRange {
		t.Errorf("bad_row_list %+v; want row %d, -infinity, %s", l, bad, hourglass.BadDeadlineOutOfRange)
	}
	var list struct {
		Total int64 `json:"total"`
		Rows  []struct {
			Key, Deadline, Reason string
		} `json:"rows"`
	}
	if err := json.Unmarshal(get("/v1/sources/shop_orders/bad-rows"), &list); err != nil || list.Total != 1 || len(list.Rows) != 1 || list.Rows[0].Key != strconv.FormatInt(bad, 10) {
		t.Errorf("GET /v1/sources/shop_orders/bad-rows = %+v, %v; want row %d", list, err, bad)
	}
	m := string(get("/metrics"))
	for _, want := range []string{
		`hourglass_source_bad_rows_total{reason="deadline_out_of_range",source="shop_orders"} 1`,
		`hourglass_source_bad_rows_total{reason="key_out_of_range",source="shop_orders"} 0`,
		`hourglass_source_bad_rows_total{reason="deadline_unreadable",source="shop_orders"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
