package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestSourcesConformance runs the suite with the shop's tables in schema
// shop and hourglass's in schema hourglass of one database.
func TestSourcesConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseSources(t, hourglasstest.SourceHarness{
		Open: func(t *testing.T) (a, b hourglasstest.SourceDB, shop hourglasstest.Shop) {
			url := pgtest.NewDatabase(t)
			db := pgtest.Open(t, url)
			return openSchema(t, url, "hourglass"), openSchema(t, url, "hourglass"), hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
		},
	})
}

// TestSourceCloseGivesWay: a close that waits for a row lock the shop holds
// gives way after the source lock timeout (100 ms) each attempt, fails
// after its retries instead of waiting for the shop, changes nothing, and
// closes the row once the shop's transaction is gone.
func TestSourceCloseGivesWay(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url)
	store := openSchema(t, url, "hourglass")
	shop := hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	ctx := t.Context()
	tbl, _, err := store.OpenSource(ctx, shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	id := shop.Order(t, "u", -time.Second, "A", 1)
	rows := []hourglass.DueItem{{ID: id, At: time.Now().Add(-time.Second)}}

	hold, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.ExecContext(ctx, `SELECT 1 FROM shop.orders WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := tbl.Close(ctx, rows)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Errorf("Close while the shop holds the row = %+v, %v; want a lock timeout", res, err)
	}
	if took > 5*time.Second {
		t.Errorf("Close gave way after %s; want about 5 × 100 ms", took)
	}
	if st := shop.Status(t, id); st != "UNPAID" {
		t.Errorf("status %s after a close that gave way", st)
	}
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	res, err = tbl.Close(ctx, rows)
	if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceClosed {
		t.Fatalf("Close once the shop let go = %+v, %v; want closed", res, err)
	}
}
