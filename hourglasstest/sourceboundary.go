package hourglasstest

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// sourcePayBoundary: the documented pay (Shop.PayStatement) compares with
// the statement's clock, as hourglass's guard does, so the boundary is the
// deadline however long before it the pay's transaction began: a pay run
// 100 ms before the deadline wins, one run 100 ms after it changes
// nothing and the close wins, both in transactions begun 400 ms before
// the deadline. (With PostgreSQL's now(), the transaction's start, the
// late pay would win: an order paid after its deadline.)
func sourcePayBoundary(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	ctx := t.Context()
	tbl, _, err := db.OpenSource(ctx, shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		at   time.Duration // when the pay's update runs, from the deadline
		paid bool
	}{
		{"before", -100 * time.Millisecond, true},
		{"after", 100 * time.Millisecond, false},
	} {
		const in = 500 * time.Millisecond
		// The database sets the deadline at the order's INSERT, somewhere
		// between began and ended (seconds apart on a loaded machine): time
		// the pay that must win from the earliest it can be, the one that
		// must lose from the latest.
		began := time.Now()
		id := shop.Order(t, "u", in, "A", 1)
		deadline := time.Now().Add(in)
		if c.paid {
			deadline = began.Add(in)
		}
		if !until(t, deadline.Add(-400*time.Millisecond)) {
			t.Fatalf("%s: the order took too long to create", c.name)
		}
		tx, err := shop.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var one int
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil { // the transaction has begun
			t.Fatal(err)
		}
		until(t, deadline.Add(c.at))
		res, err := tx.ExecContext(ctx, shop.Bind(shop.PayStatement()), id)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := res.RowsAffected()
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if paid := n == 1; paid != c.paid {
			t.Errorf("a pay %s after the deadline in a transaction begun 400 ms before it: paid %v; want %v", c.at, paid, c.paid)
		}
		until(t, deadline.Add(150*time.Millisecond))
		out, err := tbl.Close(ctx, []hourglass.DueItem{{ID: id, At: deadline}})
		if err != nil || len(out) != 1 {
			t.Fatalf("Close = %+v, %v", out, err)
		}
		if closed := out[0].Outcome == hourglass.SourceClosed; closed == c.paid {
			t.Errorf("%s: the close after the pay = %+v; want closed only when the pay lost", c.name, out[0])
		}
	}
}

// until sleeps until at; it reports false when at had passed already.
func until(t testing.TB, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return false
	}
	select {
	case <-time.After(d):
	case <-t.Context().Done():
	}
	return true
}
