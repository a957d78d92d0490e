package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/jackc/pgx/v5"
)

// TestWriterPlansAreKept: the statements of batches of creates (with and
// without idempotency keys) and closes, run more than five times each on
// tables never analyzed (a new database, autovacuum off: what hourglass
// bench and a first deployment run on), keep a generic plan instead of
// being planned again at every execution. A statement whose generic plan
// costs more than its custom ones, as "id = ANY($1)" with an array of
// fewer than 10 keys does, is planned at every batch: 0.1-0.16 ms of a
// batch's server time (docs/benchmarks/postgres-speed.md).
func TestWriterPlansAreKept(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openForPlans(t,
		`INSERT INTO products (sku, name, category, available, reserved) SELECT 'sku-' || lpad(g::text, 5, '0'), 'n', 'c', 1000000, 1000 FROM generate_series(1, 1000) g`,
		`INSERT INTO orders (id, user_id, status, items, created_at, deadline)
SELECT g, 'u', 'pending_payment', '[{"sku":"sku-' || lpad((1 + g % 1000)::text, 5, '0') || '","quantity":1}]', 0, 0 FROM generate_series(1, 1000) g`,
		`SELECT setval(pg_get_serial_sequence('orders', 'id'), 1000)`)
	next := int64(1)
	for i := range 96 { // each statement more than five times on each of the 2 connections
		var ops []*batch.Op
		creates := 3
		if i%4 == 3 {
			creates = 1 // a batch of one create alone: arrays of one element
		}
		for j := range creates {
			items := []hourglass.Item{{SKU: fmt.Sprintf("sku-%05d", 1+(i*3+j)%1000), Quantity: 1}}
			o := &batch.Op{Kind: batch.Create, Create: hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour, Items: items},
				Items: stored.EncodeItems(items)}
			if j == 0 && i%2 == 0 {
				o.Create.IdempotencyKey, o.Create.RequestHash = fmt.Sprintf("key-%d", i), []byte{1}
			}
			ops = append(ops, o)
		}
		if i%4 != 3 {
			ops = append(ops, &batch.Op{Kind: batch.Close, IDs: []int64{next, next + 1}})
			next += 2
		}
		if _, err := (dialect{s}).Run(ctx, ops); err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			if o.Res.Err != nil {
				t.Fatal(o.Res.Err)
			}
		}
	}
	for _, c := range s.pool.AcquireAllIdle(ctx) {
		rows, err := c.Query(context.WithoutCancel(ctx), `SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements
WHERE custom_plans > 5 AND generic_plans = 0`, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		var (
			generic, custom int64
			sql             string
		)
		_, err = pgx.ForEachRow(rows, []any{&generic, &custom, &sql}, func() error {
			t.Errorf("planned at every execution (%d custom plans, %d generic): %s", custom, generic, strings.Join(strings.Fields(sql), " "))
			return nil
		})
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
}
