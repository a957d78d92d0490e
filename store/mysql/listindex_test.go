package mysql

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/store/internal/sqlq/sqlqtest"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestOrderFiltersUseIndexes: every filter of GET /v1/orders and the
// combinations users run (sqlqtest.OrderListPlans) read a range (or a ref) of
// the index ListOrdersSQL names for them, never the orders table whole, on
// 50,000 orders.
func TestOrderFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	s := openFilled(t, n)
	for _, c := range sqlqtest.OrderListPlans(n) {
		q, args := s.ListOrdersSQL(c.Filter)
		rows := explainRows(t, s.db, q, args...)
		read := 0
		for _, r := range rows {
			if !strings.HasPrefix(r["table"], "orders") {
				continue // the merge of a union's arms: a page each at most
			}
			read++
			if r["key"] != c.Index || (r["type"] != "range" && r["type"] != "ref") {
				t.Errorf("%s: orders read as %s through %q, want a range of %s: %v", c.Name, r["type"], r["key"], c.Index, r)
			}
		}
		if read == 0 {
			t.Errorf("%s: no plan row reads orders: %v", c.Name, rows)
		}
		t.Logf("%s: %v", c.Name, rows)
	}
}

// numbers is a FROM item whose column g counts 1..n (n at most 10^6), from
// the cross join of six digit tables: portable to MySQL and MariaDB.
func numbers(n int) string {
	digits := `(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
	var from, sum []string
	for i, p := 0, 1; i < 6; i, p = i+1, p*10 {
		from = append(from, fmt.Sprintf("%s d%d", digits, i))
		sum = append(sum, fmt.Sprintf("d%d.d * %d", i, p))
	}
	return fmt.Sprintf(`(SELECT 1 + %s AS g FROM %s) k WHERE g <= %d`, strings.Join(sum, " + "), strings.Join(from, " CROSS JOIN "), n)
}

func myConcat(a, b string) string { return "CONCAT(" + a + ", " + b + ")" }

// explainRows returns the rows of "EXPLAIN " + query, each a map from
// column to value.
func explainRows(t *testing.T, db *sql.DB, query string, args ...any) []map[string]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = vals[i].String
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkListOrders reads pages of each filter of GET /v1/orders over
// sqlqtest.BenchOrderListSize orders (HOURGLASS_BENCH_ORDER_LIST; the
// figures in BENCHMARKS.md are of 1,000,000).
func BenchmarkListOrders(b *testing.B) {
	n := sqlqtest.BenchOrderListSize(b)
	s := openFilled(b, n)
	sqlqtest.BenchOrderLists(b, n, s.ListOrders)
}

// openFilled opens a store on a new database with n orders filled as
// sqlqtest.OrderListPlans describes, analyzed.
func openFilled(tb testing.TB, n int) *Store {
	tb.Helper()
	s, err := Open(tb.Context(), Config{URL: mytest.NewDatabase(tb), MaxConns: 2})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	for _, q := range []string{sqlqtest.FillOrdersSQL(n, numbers(n), myConcat), `ANALYZE TABLE orders`} {
		if _, err := s.db.ExecContext(tb.Context(), q); err != nil {
			tb.Fatalf("%.60s…: %v", q, err)
		}
	}
	return s
}

// TestTimerFiltersUseIndexes: every filter of GET /v1/timers and the
// combinations users run (sqlqtest.TimerListPlans) read a range (or a ref)
// of the index Timers names for them, never the timers table whole, on
// 50,000 timers.
func TestTimerFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	s, err := Open(t.Context(), Config{URL: mytest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, q := range []string{sqlqtest.FillTimersSQL(numbers(n), "timer_key", "X'00'", myConcat), `ANALYZE TABLE timers`} {
		if _, err := s.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%.60s…: %v", q, err)
		}
	}
	for _, c := range sqlqtest.TimerListPlans(n) {
		q, args, err := s.TimersSQL(c.Filter)
		if err != nil {
			t.Fatal(err)
		}
		index := c.Index
		if c.Key {
			index = "timers_key"
		}
		rows := explainRows(t, s.db, q, args...)
		read := 0
		for _, r := range rows {
			if !strings.HasPrefix(r["table"], "timers") {
				continue // the merge of a union's arms: a page each at most
			}
			read++
			if r["key"] != index || (r["type"] != "range" && r["type"] != "ref") {
				t.Errorf("%s: timers read as %s through %q, want a range of %s: %v", c.Name, r["type"], r["key"], index, r)
			}
		}
		if read == 0 {
			t.Errorf("%s: no plan row reads timers: %v", c.Name, rows)
		}
		t.Logf("%s: %v", c.Name, rows)
	}
}

// TestDeadLetterFiltersUseIndexes: every filter of GET /v1/deadletters and
// the combinations users run (sqlqtest.DeadLetterListPlans) read a range of
// the dead-letter index DeadLettersSQL names for them and each one's event
// by its primary key, beside 45,000 pending deliveries.
func TestDeadLetterFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	s, err := Open(t.Context(), Config{URL: mytest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	setup := sqlqtest.FillDeadLettersSQL(n, numbers, myConcat)
	for _, q := range append(setup, `ANALYZE TABLE webhooks, events, webhook_deliveries`) {
		if _, err := s.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%.60s…: %v", q, err)
		}
	}
	for _, c := range sqlqtest.DeadLetterListPlans(n) {
		q, args := s.DeadLettersSQL(c.Filter)
		rows := explainRows(t, s.db, q, args...)
		var read bool
		for _, r := range rows {
			switch r["table"] {
			case "d":
				read = true
				if r["key"] != c.Index || (r["type"] != "range" && r["type"] != "ref") {
					t.Errorf("%s: deliveries read as %s through %q, want a range of %s: %v", c.Name, r["type"], r["key"], c.Index, r)
				}
			case "e":
				if r["key"] != "PRIMARY" {
					t.Errorf("%s: events read through %q, not by their primary key: %v", c.Name, r["key"], r)
				}
			}
		}
		if !read {
			t.Errorf("%s: no plan row reads the deliveries: %v", c.Name, rows)
		}
		t.Logf("%s: %v", c.Name, rows)
	}
}
