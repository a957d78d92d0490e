package node_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestSourceRows: on PostgreSQL and on MariaDB, GET
// /v1/sources/{name}/rows lists a source's pending rows from the shop's
// table by deadline, paged and bounded by a deadline range, leaving out a
// row whose deadline cannot be read; its closed rows from hourglass's
// source.closed events; and a closed row's history says when and how
// late, and that its deadline closed it on this node. Unknown sources are
// 404, bad parameters 400.
func TestSourceRows(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var dbURL, schema string
			var shop hourglasstest.Shop
			if kind == "postgres" {
				dbURL, schema = pgtest.NewDatabase(t), "hourglass"
				shop = hourglasstest.Shop{DB: pgtest.Open(t, dbURL), Schema: "shop", Postgres: true}
			} else {
				dbURL = mytest.NewDatabase(t)
				shopURL := mytest.NewDatabase(t)
				su, _ := url.Parse(shopURL)
				shop = hourglasstest.Shop{DB: mytest.Admin(t, shopURL), Schema: strings.TrimPrefix(su.Path, "/")}
			}
			shop.Create(t, true)
			shop.PutStock(t, "A", 100)
			n, err := node.New(context.Background(), node.Config{Addr: "127.0.0.1:0", Store: store.Options{URL: dbURL, Schema: schema},
				Sources: []hourglass.Source{shop.Source("shop_orders")}, TimerMax: 1000, Cluster: node.Cluster{NodeID: "rows-" + kind},
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- n.Run(ctx) }()
			t.Cleanup(func() { stop(); <-done })

			bad := "'-infinity'"
			if kind == "mysql" {
				bad = "'0000-00-00 00:00:00'"
			}
			shop.BadOrder(t, 0, bad)
			// Due once the node serves (its first partitions owned): a
			// row due before that closes as start-up recovery.
			testenv.Eventually(t, 30*time.Second, "the node ready", func() bool { return n.Engine.Ready() })
			closed := shop.Order(t, "u", 1500*time.Millisecond, "A", 1)
			soon := shop.Order(t, "u", time.Hour, "A", 1)
			later := shop.Order(t, "u", 2*time.Hour, "A", 1)
			c := api.NewClient("http://"+n.Addr().String(), "", nil)

			var list api.SourceRowListJSON
			testenv.Eventually(t, 15*time.Second, "the due row closed", func() bool {
				list, err = c.SourceRows(ctx, "shop_orders", api.SourceRowQuery{Status: "closed"})
				return err == nil && len(list.Rows) == 1
			})
			if r := list.Rows[0]; r.Key != closed || r.Status != "closed" || r.ClosedAt == nil || *r.ClosedBy != string(hourglass.CauseDeadline) || *r.Node != "rows-"+kind || list.Next != nil {
				t.Fatalf("closed rows = %+v (closed by %s on %s; want deadline on rows-%s)", list, deref(r.ClosedBy), deref(r.Node), kind)
			}

			var keys []int64
			after := ""
			for range 5 {
				page, err := c.SourceRows(ctx, "shop_orders", api.SourceRowQuery{Status: "pending", Limit: 1, After: after})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range page.Rows {
					keys = append(keys, r.Key)
				}
				if page.Next == nil {
					break
				}
				after = *page.Next
			}
			if len(keys) != 2 || keys[0] != soon || keys[1] != later {
				t.Fatalf("pending keys, a page of one at a time = %v; want [%d %d] (the bad row left out)", keys, soon, later)
			}
			page, err := c.SourceRows(ctx, "shop_orders", api.SourceRowQuery{Status: "pending", DeadlineAfter: time.Now().Add(90 * time.Minute)})
			if err != nil || len(page.Rows) != 1 || page.Rows[0].Key != later {
				t.Fatalf("pending after 90 min = %+v, %v; want the later row", page, err)
			}
			page, err = c.SourceRows(ctx, "shop_orders", api.SourceRowQuery{Status: "pending", DeadlineBefore: time.Now().Add(90 * time.Minute)})
			if err != nil || len(page.Rows) != 1 || page.Rows[0].Key != soon {
				t.Fatalf("pending before 90 min = %+v, %v; want the sooner row", page, err)
			}

			h, err := c.SourceRowHistory(ctx, "shop_orders", closed)
			if err != nil || h.Kind != "source_row" || len(h.Events) != 1 || h.Timing.LatenessMs == nil || *h.Timing.LatenessMs < 0 {
				t.Fatalf("history of the closed row = %+v, %v", h, err)
			}
			if by, node := h.Timing.ClosedBy, h.Timing.Node; by == nil || *by != string(hourglass.CauseDeadline) || node == nil || *node != "rows-"+kind {
				t.Fatalf("history of the closed row: closed by %v on %v; want deadline on rows-%s", by, node, kind)
			}

			for _, tc := range []struct {
				path, code string
			}{
				{"/v1/sources/nope/rows?status=pending", "not_found"},
				{"/v1/sources/shop_orders/rows", "invalid_argument"},
				{"/v1/sources/shop_orders/rows?status=late", "invalid_argument"},
				{"/v1/sources/shop_orders/rows?status=pending&limit=0", "invalid_argument"},
				{"/v1/sources/shop_orders/rows?status=pending&after=x", "invalid_argument"},
				{"/v1/sources/shop_orders/rows?status=closed&after=x", "invalid_argument"},
				{"/v1/sources/shop_orders/rows?status=closed&deadline_after=soon", "invalid_argument"},
				{"/v1/sources/shop_orders/rows?status=closed&x=1", "invalid_argument"},
				{"/v1/sources/shop_orders/rows/" + "99999/history", "not_found"},
				{"/v1/sources/shop_orders/rows/0/history", "invalid_argument"},
			} {
				var e *api.Error
				if _, err := c.Do(ctx, "GET", tc.path, nil, nil, nil); !errors.As(err, &e) || e.Code != tc.code {
					t.Errorf("GET %s: %v; want %s", tc.path, err, tc.code)
				}
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
