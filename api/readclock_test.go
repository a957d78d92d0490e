package api_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// nopScheduler is an engine that schedules nothing: the orders stay
// pending in the database, and only the read derives their close.
type nopScheduler struct{}

func (nopScheduler) Schedule(hourglass.DueItem) {}
func (nopScheduler) Cancel(int64)               {}
func (nopScheduler) Ready() bool                { return true }
func (nopScheduler) Healthy() error             { return nil }

// TestReadAfterDeadlineShowsClosed: on every store, wired as cmd/hourglass
// wires it (a shared store's API clock is the node's clock corrected by the
// membership, which errs late), a GET of an unpaid order 1 ms after its
// deadline shows closed, as a pay at that instant is refused, and so does
// GET /v1/orders: 300 orders each. The database runs on this machine, so its clock is this process's
// (in whole milliseconds). Before reads took the store's clock, MariaDB
// showed pending_payment: the corrected clock is a lower bound of the
// database's.
func TestReadAfterDeadlineShowsClosed(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{store.KindSQLite, store.KindPostgres, store.KindMySQL} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var url string
			switch kind {
			case store.KindSQLite:
				url = "sqlite://" + filepath.Join(t.TempDir(), "hourglass.db")
			case store.KindPostgres:
				url = pgtest.NewDatabase(t)
			case store.KindMySQL:
				url = mytest.NewDatabase(t)
			}
			db, err := store.Open(ctx, store.Options{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			var clock hourglass.Clock = hourglass.SystemClock{}
			if cs, ok := db.(hourglass.ClusterStore); ok {
				m, err := cluster.New(cs, cluster.Config{NodeID: "n"})
				if err != nil {
					t.Fatal(err)
				}
				for range 8 { // the offset as a running node has it
					if err := m.Join(ctx); err != nil {
						t.Fatal(err)
					}
				}
				clock = m.Clock()
			}
			srv, err := api.NewServer(api.Config{Store: db, Engine: nopScheduler{}, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv.Handler())
			t.Cleanup(ts.Close)
			c := api.NewClient(ts.URL, "", ts.Client())
			if _, err := db.PutProduct(ctx, hourglass.Product{SKU: "S", Name: "s", Category: "x", Available: 1000}); err != nil {
				t.Fatal(err)
			}

			// 60 workers of 5 orders each, their starts spread over the
			// 1 s timeout so that reads fall at every instant of it (30
			// orders in a row each took 30 s, the package's longest test).
			const workers, each = 60, 5
			var (
				mu   sync.Mutex
				open []string
			)
			var wg sync.WaitGroup
			start := time.Now()
			for k := range workers {
				wg.Go(func() {
					testenv.Until(ctx, start.Add(time.Duration(k)*time.Second/workers))
					for i := range each {
						o, _, err := c.CreateOrder(ctx, api.CreateOrderRequest{UserID: "u", Items: []api.ItemJSON{{SKU: "S", Quantity: 1}}, TimeoutMs: 1000}, "")
						if err != nil {
							t.Error(err)
							return
						}
						deadline, err := time.Parse(time.RFC3339Nano, o.Deadline)
						if err != nil {
							t.Error(err)
							return
						}
						testenv.Until(ctx, deadline.Add(time.Millisecond))
						// GET the order, and list from it (every other
						// order the list goes first).
						for j := range 2 {
							sent := time.Now()
							var got api.OrderJSON
							if (i+j)%2 == 0 {
								got, err = c.Order(ctx, o.ID)
							} else {
								var l api.OrderListJSON
								if l, err = c.ListOrders(ctx, "", 1, o.ID-1); err == nil && (len(l.Orders) != 1 || l.Orders[0].ID != o.ID) {
									t.Errorf("list after %d: %+v, want order %d", o.ID-1, l.Orders, o.ID)
									return
								} else if err == nil {
									got = l.Orders[0]
								}
							}
							if err != nil {
								t.Error(err)
								return
							}
							if got.Status != string(hourglass.StateClosed) {
								mu.Lock()
								open = append(open, got.Status+" at deadline+"+sent.Sub(deadline).String())
								mu.Unlock()
							}
						}
					}
				})
			}
			wg.Wait()
			if len(open) > 0 {
				t.Errorf("%d of %d reads (a GET and a list each of %d orders) 1ms or more after the deadline showed an order not closed: %v", len(open), 2*workers*each, workers*each, open[:min(len(open), 5)])
			}
		})
	}
}
