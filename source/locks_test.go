package source_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/source"
)

// TestLockedRowDelaysOnlyItself: a transaction of the shop's holds one
// row of a batch due together (the order's row, or the stock row its
// release needs) past the deadline. The other rows close on time (within
// 300 ms of their deadline); the held one closes soon after the shop lets
// go (within 1 s), once; the lock waits are counted. The stock case runs
// on PostgreSQL only: MySQL's sources wait 3 s for a lock
// (innodb_lock_wait_timeout), which a batch waits twice (docs/sources.md).
func TestLockedRowDelaysOnlyItself(t *testing.T) {
	for name, open := range shops() {
		for _, what := range []string{"row", "stock"} {
			t.Run(name+"/"+what, func(t *testing.T) {
				if what == "stock" && name != "postgres" {
					t.Skip("MySQL waits 3 s for a stock row (innodb_lock_wait_timeout)")
				}
				db, shop := open(t)
				shop.Create(t, true)
				shop.PutStock(t, "A", 100)
				shop.PutStock(t, "B", 100)
				// The rows share one deadline, so that the wheel hands them to
				// one close; the runner starts once they are written.
				held := shop.Order(t, "u", time.Hour, "B", 1)
				others := []int64{}
				for range 20 {
					others = append(others, shop.Order(t, "u", time.Hour, "A", 1))
				}
				due := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
				shop.Exec(t, "UPDATE "+shop.T("orders")+" SET expire_at = ?", due.UTC())
				obs := &observer{}
				run(t, db, shop.Source("shop_orders"), obs)
				hold, err := shop.DB.BeginTx(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer hold.Rollback()
				lock, arg := "SELECT 1 FROM "+shop.T("orders")+" WHERE id = ? FOR UPDATE", any(held)
				if what == "stock" {
					lock, arg = "SELECT 1 FROM "+shop.T("stock")+" WHERE sku = ? FOR UPDATE", "B"
				}
				var one int
				if err := hold.QueryRowContext(t.Context(), shop.Bind(lock), arg).Scan(&one); err != nil {
					t.Fatal(err)
				}
				testenv.Until(t.Context(), due.Add(1500*time.Millisecond))
				released := time.Now()
				if err := hold.Rollback(); err != nil {
					t.Fatal(err)
				}
				testenv.EventuallyEvery(t, 10*time.Second, 10*time.Millisecond, "every order closed", func() bool {
					var left int
					shop.DB.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+shop.T("orders")+" WHERE status = 'UNPAID'").Scan(&left)
					return left == 0
				})
				var worst time.Duration
				for _, id := range others {
					deadline, closedAt := closeOf(t, db, id)
					if late := closedAt.Sub(deadline); late > worst {
						worst = late
					}
				}
				if worst > 300*time.Millisecond {
					t.Errorf("the rows beside the held one closed up to %s after their deadline; want within 300 ms", worst)
				}
				_, closedAt := closeOf(t, db, held)
				if after := closedAt.Sub(released); after < -5*time.Millisecond || after > time.Second {
					t.Errorf("the held row closed %s after the shop let go; want within 1 s, not before", after)
				}
				for _, sku := range []string{"A", "B"} {
					if a, r := shop.Stock(t, sku); a != 100 || r != 0 {
						t.Errorf("stock %s %d/%d; want 100/0 (each released once)", sku, a, r)
					}
				}
				obs.mu.Lock()
				waits, failed := obs.lockWaits, obs.failed
				obs.mu.Unlock()
				if waits == 0 || failed != 0 {
					t.Errorf("%d lock waits, %d failed statements counted; want some and none", waits, failed)
				}
				t.Logf("%s/%s: the others closed within %s of their deadline; the held row %s after the shop let go; %d lock waits",
					name, what, worst, closedAt.Sub(released).Round(time.Millisecond), waits)
			})
		}
	}
}

// closeOf returns the deadline and close time of row id's one
// source.closed event (failing the test unless there is exactly one).
func closeOf(t *testing.T, db hourglasstest.SourceDB, id int64) (deadline, closedAt time.Time) {
	t.Helper()
	evs, err := db.OrderEvents(t.Context(), hourglass.SourceEventOrderID("shop_orders", id))
	if err != nil || len(evs) != 1 {
		t.Fatalf("row %d: %d source.closed events, %v; want one", id, len(evs), err)
	}
	var body struct {
		Deadline time.Time `json:"deadline"`
		ClosedAt time.Time `json:"closed_at"`
	}
	if err := json.Unmarshal(evs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Deadline, body.ClosedAt
}

// TestBlockedRowReported: a row the shop holds locked past
// Config.BlockedAlert is named by Blocked (the source_row_blocked alert)
// and logged at ERROR once; its earlier lock waits only at DEBUG; once it
// closes it is no longer named, and an INFO says so.
func TestBlockedRowReported(t *testing.T) {
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 10)
			var logs syncBuffer
			obs := &observer{}
			r := runWith(t, source.Config{Store: db, Sources: []hourglass.Source{shop.Source("shop_orders")}, Observer: obs,
				BlockedAlert: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			id := shop.Order(t, "u", 300*time.Millisecond, "A", 1)
			hold, err := shop.DB.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback()
			var one int
			if err := hold.QueryRowContext(t.Context(), shop.Bind("SELECT 1 FROM "+shop.T("orders")+" WHERE id = ? FOR UPDATE"), id).Scan(&one); err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("key %d", id)
			testenv.Eventually(t, 5*time.Second, "the row named blocked", func() bool {
				b := r.Blocked(time.Now())
				return len(b) == 1 && strings.HasPrefix(b[0], "source shop_orders "+key+" for ")
			})
			// Logged by the first retry past the bound.
			testenv.Eventually(t, 2*time.Second, "an ERROR", func() bool { return strings.Contains(logs.String(), "level=ERROR") })
			if err := hold.Rollback(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 5*time.Second, "the row closed", func() bool { return shop.Status(t, id) == "CLOSED" })
			testenv.Eventually(t, time.Second, "the row no longer named", func() bool { return len(r.Blocked(time.Now())) == 0 })
			out := logs.String()
			if n := strings.Count(out, "level=ERROR"); n != 1 || !strings.Contains(out, "level=ERROR msg=\"source: a row stays locked") {
				t.Errorf("%d ERROR lines; want one for the row past the bound:\n%s", n, out)
			}
			if !strings.Contains(out, "level=DEBUG msg=\"source: a row was locked") || !strings.Contains(out, "level=INFO msg=\"source: a row the shop's transactions kept locked is no longer blocked\"") {
				t.Errorf("want DEBUG lines for the waits and an INFO once it closed:\n%s", out)
			}
			if strings.Contains(out, "level=WARN") {
				t.Errorf("a WARN for a lock wait:\n%s", out)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a log).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLockStatementTakesStockInOrder: a batch's lock statement locks its
// orders' stock rows in SKU order, as the shop's transactions do, so a
// shop transaction that holds SKU A and then wants B finishes while the
// batch waits for A, and the batch then closes both orders without a lock
// wait. Without the lock statement the batch's releases run in key order:
// the order of B first, so the batch holds B while it waits for A, the
// shop's transaction waits for B, and the batch gives way (a lock wait).
func TestLockStatementTakesStockInOrder(t *testing.T) {
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 100)
			shop.PutStock(t, "B", 100)
			first := shop.Order(t, "u", time.Hour, "B", 1) // the lower key: released first without the lock statement
			second := shop.Order(t, "u", time.Hour, "A", 1)
			due := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
			shop.Exec(t, "UPDATE "+shop.T("orders")+" SET expire_at = ?", due.UTC())
			obs := &observer{}
			run(t, db, shop.Source("shop_orders"), obs)

			// The shop's transaction: A, then (once a close waits for it) B.
			hold, err := shop.DB.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback()
			if _, err := hold.ExecContext(t.Context(), shop.Bind("UPDATE "+shop.T("stock")+" SET available = available - 1 WHERE sku = ?"), "A"); err != nil {
				t.Fatal(err)
			}
			// MariaDB refreshes INNODB_TRX only when it was not read for 0.1
			// s; its sources wait 3 s for a lock, PostgreSQL's lock statement
			// 50 ms.
			waiting, every := "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'", 200*time.Millisecond
			if shop.Postgres {
				waiting, every = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'", time.Millisecond
			}
			testenv.EventuallyEvery(t, 10*time.Second, every, "a close waiting for stock A", func() bool {
				var n int
				shop.DB.QueryRowContext(t.Context(), waiting).Scan(&n)
				return n > 0
			})
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if _, err := hold.ExecContext(ctx, shop.Bind("UPDATE "+shop.T("stock")+" SET available = available + 1 WHERE sku = ?"), "B"); err != nil {
				t.Fatalf("the shop's transaction, holding A, could not take B while the close waited: %v", err)
			}
			if err := hold.Commit(); err != nil {
				t.Fatalf("commit the shop's transaction: %v", err)
			}
			testenv.EventuallyEvery(t, 10*time.Second, 10*time.Millisecond, "both orders closed", func() bool {
				return shop.Status(t, first) == "CLOSED" && shop.Status(t, second) == "CLOSED"
			})
			// The shop moved one from A to B; each close released its one.
			for sku, want := range map[string]int{"A": 99, "B": 101} {
				if a, r := shop.Stock(t, sku); a != want || r != 0 {
					t.Errorf("stock %s %d/%d; want %d/0 (each released once)", sku, a, r, want)
				}
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.lockWaits != 0 || obs.failed != 0 {
				t.Errorf("%d lock waits, %d failed statements; want none: the batch took its stock in SKU order", obs.lockWaits, obs.failed)
			}
		})
	}
}

// TestLockStatementFailureCostsOnlyItsRow: a lock statement that fails on
// one row's values (a division by zero for that key) names no row, so the
// batch runs row by row: the other rows close, and the release that fails
// for that row too fails it alone. PostgreSQL only: MySQL's division by
// zero in a SELECT yields NULL, not an error.
func TestLockStatementFailureCostsOnlyItsRow(t *testing.T) {
	db, shop := shops()["postgres"](t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 100)
	var ids []int64
	for range 5 {
		ids = append(ids, shop.Order(t, "u", time.Hour, "A", 1))
	}
	bad := ids[2]
	due := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	shop.Exec(t, "UPDATE "+shop.T("orders")+" SET expire_at = ?", due.UTC())
	src := shop.Source("shop_orders")
	src.Lock = []string{fmt.Sprintf("SELECT 1 / (order_id - %d) FROM %s WHERE order_id IN (:keys)", bad, shop.T("order_items"))}
	src.Close = append(src.Close, fmt.Sprintf("SELECT 1 / (id - %d) FROM %s WHERE id = :key", bad, shop.T("orders")))
	obs := &observer{}
	run(t, db, src, obs)
	testenv.EventuallyEvery(t, 10*time.Second, 10*time.Millisecond, "the other orders closed", func() bool {
		for _, id := range ids {
			if id != bad && shop.Status(t, id) != "CLOSED" {
				return false
			}
		}
		return true
	})
	if got := shop.Status(t, bad); got != "UNPAID" {
		t.Errorf("the order whose statements fail is %s; want UNPAID (rolled back, retried)", got)
	}
	if a, r := shop.Stock(t, "A"); a != 99 || r != 1 {
		t.Errorf("stock A %d/%d; want 99/1 (four released once, the failing one still reserved)", a, r)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.failed == 0 {
		t.Error("no failed statement counted for the row whose statements fail")
	}
}
