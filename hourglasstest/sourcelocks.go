package hourglasstest

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// sourceLockedRow: a close of a batch in which one row is locked by a
// transaction of the shop's closes the others at once, without waiting
// for the lock, and reports the locked one SourceBlocked, unchanged; once
// the shop lets go it closes, once.
func sourceLockedRow(t *testing.T, h SourceHarness) {
	sourceLocked(t, h, false)
}

// sourceLockedStock: the same with a stock row one row's release needs
// locked by the shop: that row is rolled back (its guard too) and
// reported SourceBlocked; the others close after one lock wait of the
// store's.
func sourceLockedStock(t *testing.T, h SourceHarness) {
	sourceLocked(t, h, true)
}

func sourceLocked(t *testing.T, h SourceHarness, stock bool) {
	if h.LocksElsewhere {
		t.Skip("the shop's locks are another node's: a close does not wait for them, and the loser fails certification at commit")
	}
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	shop.PutStock(t, "B", 10)
	ctx := t.Context()
	tbl, _, err := db.OpenSource(ctx, shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	a := shop.Order(t, "u", -time.Second, "A", 1)
	b := shop.Order(t, "u", -time.Second, "B", 1)
	c := shop.Order(t, "u", -time.Second, "A", 1)
	rows := []hourglass.DueItem{{ID: a}, {ID: b}, {ID: c}}

	hold, err := shop.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	lock, arg := `SELECT 1 FROM `+shop.T("orders")+` WHERE id = ? FOR UPDATE`, any(b)
	if stock {
		lock, arg = `SELECT 1 FROM `+shop.T("stock")+` WHERE sku = ? FOR UPDATE`, "B"
	}
	var one int
	if err := hold.QueryRowContext(ctx, shop.Bind(lock), arg).Scan(&one); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := tbl.Close(ctx, rows)
	took := time.Since(start)
	if err != nil || len(res) != 3 {
		t.Fatalf("Close while the shop holds a lock = %+v, %v; want 3 results", res, err)
	}
	if res[0].Outcome != hourglass.SourceClosed || res[2].Outcome != hourglass.SourceClosed || res[1].Outcome != hourglass.SourceBlocked || res[1].Err == nil {
		t.Fatalf("Close = %+v; want %d and %d closed, %d blocked with its error", res, a, c, b)
	}
	if stock && !strings.Contains(res[1].Err.Error(), "close[1]") {
		t.Errorf("the blocked row's error %q does not name close[1]", res[1].Err)
	}
	// A locked source row is skipped without a wait; a locked stock row
	// costs the store's lock wait (PostgreSQL 20 ms, MySQL 3 s), twice on
	// MySQL (the packet, then one statement at a time to name the row).
	if limit := map[bool]time.Duration{false: time.Second, true: 10 * time.Second}[stock]; took > limit {
		t.Errorf("Close took %s; want under %s", took, limit)
	}
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	if st := shop.Status(t, b); st != "UNPAID" {
		t.Errorf("the blocked row is %s; want UNPAID (rolled back)", st)
	}
	res, err = tbl.Close(ctx, rows[1:2])
	if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceClosed {
		t.Fatalf("Close once the shop let go = %+v, %v; want closed", res, err)
	}
	for _, id := range []int64{a, b, c} {
		if evs, err := db.OrderEvents(ctx, hourglass.SourceEventOrderID("shop_orders", id)); err != nil || len(evs) != 1 {
			t.Errorf("row %d: %d events, %v; want one", id, len(evs), err)
		}
	}
	for _, sku := range []string{"A", "B"} {
		if av, re := shop.Stock(t, sku); av != 10 || re != 0 {
			t.Errorf("stock %s %d/%d; want 10/0 (each released once)", sku, av, re)
		}
	}
}
