package postgres

import (
	"strings"
	"testing"
)

// TestCombine: consecutive writes to different tables, and inserts beside
// an update of their table, become one statement with their parameters
// renumbered; a second update of a table, an upsert after an update, and a
// statement without a target start a new one, in order.
func TestCombine(t *testing.T) {
	t.Parallel()
	q := func(name, sql string, args ...any) stmt {
		target, kind := writeTarget(sql)
		return stmt{name: name, sql: sql, args: args, target: target, kind: kind}
	}
	all := []stmt{
		q("insert orders", `INSERT INTO orders (id) SELECT * FROM unnest($1::bigint[])`, []int64{1}),
		q("update products", `UPDATE products SET available = $2 WHERE sku = ANY($1::text[])`, []string{"a"}, 1),
		q("announce", `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, "c", []string{"x"}),
		q("update orders", `UPDATE orders SET status = $2 WHERE id = ANY($1::bigint[])`, []int64{2}, "paid"),
		q("extend order", `UPDATE orders SET deadline = $2 WHERE id = $1`, int64(3), int64(9)),
		q("insert outbox", `INSERT INTO timer_outbox (order_id) SELECT unnest($1::bigint[]) ON CONFLICT (order_id) DO NOTHING`, []int64{3}),
		q("delete outbox", `DELETE FROM timer_outbox WHERE order_id = $1`, int64(3)),
		q("insert outbox row", `INSERT INTO timer_outbox (order_id) VALUES ($1)`, int64(4)),
		q("lock keys", keyLockSQL, 1, []string{"k"}),
		q("insert keys", `INSERT INTO idempotency_keys (key) SELECT unnest($1::text[])`, []string{"k"}),
		q("insert more keys", `INSERT INTO idempotency_keys (key) SELECT unnest($1::text[])`, []string{"l"}),
	}
	got := combine(all)
	var names []string
	for _, st := range got {
		names = append(names, st.name)
	}
	want := []string{"insert orders, update products, announce, update orders", "extend order, insert outbox", "delete outbox, insert outbox row",
		"lock keys", "insert keys, insert more keys"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Fatalf("statements %q, want %q", names, want)
	}
	j := got[0]
	if len(j.args) != 7 {
		t.Fatalf("joined statement has %d arguments, want 7", len(j.args))
	}
	for _, frag := range []string{
		"w0 AS (\nINSERT INTO orders (id) SELECT * FROM unnest($1::bigint[])\n)",
		"w1 AS (\nUPDATE products SET available = $3 WHERE sku = ANY($2::text[])\n)",
		"w2 AS (\nSELECT pg_notify($4, p) FROM unnest($5::text[]) AS p\n)",
		"w3 AS (\nUPDATE orders SET status = $7 WHERE id = ANY($6::bigint[])\n)",
		"\nSELECT (SELECT count(*) FROM w2)", // a SELECT runs only if read
	} {
		if !strings.Contains(j.sql, frag) {
			t.Errorf("joined statement lacks %q:\n%s", frag, j.sql)
		}
	}
	if got[3].sql != keyLockSQL {
		t.Errorf("a statement alone was changed: %q", got[3].sql)
	}
}

// TestCombineEvents: the events' statement gives its CTEs and its columns,
// and its answer reads them from the joined statement's row.
func TestCombineEvents(t *testing.T) {
	t.Parallel()
	ev := stmt{name: "insert events", sql: eventsSQL, args: make([]any, 10), target: "events", kind: addsRows, with: eventsCTEs,
		cols: []string{eventsFanned, eventsNotified}}
	target, kind := writeTarget(productsUpdateSQL)
	up := stmt{name: "update products", sql: productsUpdateSQL, args: make([]any, 4), target: target, kind: kind}
	got := combine([]stmt{up, ev})
	if len(got) != 1 {
		t.Fatalf("%d statements, want 1", len(got))
	}
	sql := got[0].sql
	if !strings.Contains(sql, "unnest($6::text[], $7::text[], $8::bigint[]") || !strings.Contains(sql, "pg_notify($12, '')") {
		t.Errorf("the events' parameters are not shifted by the 4 before them:\n%s", sql)
	}
	if !strings.HasSuffix(sql, "\nSELECT "+eventsFanned+", "+eventsNotified) {
		t.Errorf("the joined statement does not end with the events' columns:\n%s", sql)
	}
}
