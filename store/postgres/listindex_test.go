package postgres

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/sqlq/sqlqtest"
)

// TestStatusListsUseIndexes: GET /v1/orders?status= and GET
// /v1/timers?status= read their status's range of an index in page order
// (orders_status_id, timers_status_key; migration 0005), not the table in
// id or key order filtered, on tables large enough for the planner to
// choose (50,000 orders and timers, 1 in 1,000 of the status asked).
func TestStatusListsUseIndexes(t *testing.T) {
	t.Parallel()
	s := openForPlans(t,
		`INSERT INTO orders (user_id, status, items, created_at, deadline, closed_at, close_reason)
SELECT 'u', CASE g % 1000 WHEN 0 THEN 'paid' WHEN 1 THEN 'pending_payment' WHEN 2 THEN 'closed' ELSE 'completed' END, '[]', g, g + 60000,
	CASE WHEN g % 1000 = 2 THEN g + 60000 END, CASE WHEN g % 1000 = 2 THEN 'timeout' END
FROM generate_series(1, 50000) g`,
		`INSERT INTO timers (key, status, fire_at, fired_at, request_hash, created_at, updated_at)
SELECT 'k' || g, CASE WHEN g % 1000 = 0 THEN 'cancelled' ELSE 'fired' END, g, g, '\x00', g, g FROM generate_series(1, 50000) g`,
		`ANALYZE orders`, `ANALYZE timers`,
	)
	orders := func(st hourglass.State) (string, []any) {
		q, args := s.ListOrdersSQL(hourglass.OrderFilter{Status: st, Now: hourglass.FromUnixMilli(1), Limit: 50})
		return sqlq.Rebind(q), args
	}
	paid, paidArgs := orders(hourglass.StatePaid)
	pending, pendingArgs := orders(hourglass.StatePendingPayment)
	closed, closedArgs := orders(hourglass.StateClosed)
	cancelled, cancelledArgs, err := s.TimersSQL(hourglass.TimerFilter{Status: hourglass.TimerCancelled, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, sql, index, scanned string
		args                      []any
	}{
		{"orders paid", paid, "orders_status_id", "orders_pkey", paidArgs},
		{"orders pending", pending, "orders_status_id", "orders_pkey", pendingArgs},
		{"orders closed", closed, "orders_status_id", "orders_pkey", closedArgs},
		{"timers cancelled", sqlq.Rebind(cancelled), "timers_status_key", "timers_key_key", cancelledArgs},
	} {
		p := explain(t, s.pool, tc.sql, tc.args...)
		if !strings.Contains(p, tc.index) || strings.Contains(p, "Seq Scan") || strings.Contains(p, tc.scanned) {
			t.Errorf("%s: want a range of %s, not a scan of the table or of %s; plan:\n%s", tc.name, tc.index, tc.scanned, p)
		}
	}
}

// TestOrderFiltersUseIndexes: every filter of GET /v1/orders and the
// combinations users run (sqlqtest.OrderListPlans) read a range of the index
// ListOrdersSQL names for them, never the table whole, on 50,000 orders
// analyzed so the planner chooses by their statistics.
func TestOrderFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	s := openForPlans(t, sqlqtest.FillOrdersSQL(n, fmt.Sprintf("generate_series(1, %d) AS k(g)", n), pgConcat), `ANALYZE orders`)
	for _, c := range sqlqtest.OrderListPlans(n) {
		q, args := s.ListOrdersSQL(c.Filter)
		p := explain(t, s.pool, sqlq.Rebind(q), args...)
		if !usesIndex(p, c.Index) && (c.Alt == "" || !usesIndex(p, c.Alt)) {
			t.Errorf("%s: want a range of %s; plan:\n%s", c.Name, c.Index, p)
		}
		if strings.Contains(p, "Seq Scan") || strings.Contains(p, "orders_pkey") {
			t.Errorf("%s: the table is scanned; plan:\n%s", c.Name, p)
		}
		t.Logf("%s:\n%s", c.Name, p)
	}
}

func pgConcat(a, b string) string { return a + " || " + b }

// usesIndex says whether the plan p reads a range of the orders index.
func usesIndex(p, index string) bool {
	return strings.Contains(p, "Index Scan using "+index+" on orders") || strings.Contains(p, "Index Only Scan using "+index+" on orders") ||
		strings.Contains(p, "Bitmap Index Scan on "+index)
}

// BenchmarkListOrders reads pages of each filter of GET /v1/orders over
// sqlqtest.BenchOrderListSize orders (HOURGLASS_BENCH_ORDER_LIST; the
// figures in BENCHMARKS.md are of 1,000,000).
func BenchmarkListOrders(b *testing.B) {
	n := sqlqtest.BenchOrderListSize(b)
	s := openForPlans(b, sqlqtest.FillOrdersSQL(n, fmt.Sprintf("generate_series(1, %d) AS k(g)", n), pgConcat), `ANALYZE orders`)
	sqlqtest.BenchOrderLists(b, n, s.ListOrders)
}

// TestTimerFiltersUseIndexes: every filter of GET /v1/timers and the
// combinations users run (sqlqtest.TimerListPlans) read a range of the
// index Timers names for them, never the table whole, on 50,000 timers.
func TestTimerFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	s := openForPlans(t, sqlqtest.FillTimersSQL(fmt.Sprintf("generate_series(1, %d) AS k(g)", n), "key", `'\x00'::bytea`, pgConcat), `ANALYZE timers`)
	for _, c := range sqlqtest.TimerListPlans(n) {
		q, args, err := s.TimersSQL(c.Filter)
		if err != nil {
			t.Fatal(err)
		}
		p := explain(t, s.pool, sqlq.Rebind(q), args...)
		index := c.Index
		if c.Key {
			index = "timers_key_key"
		}
		uses := func(index string) bool {
			return strings.Contains(p, "Index Scan using "+index+" on timers") || strings.Contains(p, "Index Only Scan using "+index+" on timers") ||
				strings.Contains(p, "Bitmap Index Scan on "+index)
		}
		if !uses(index) && (c.Alt == "" || !uses(c.Alt)) {
			t.Errorf("%s: want a range of %s; plan:\n%s", c.Name, index, p)
		}
		if strings.Contains(p, "Seq Scan") || strings.Contains(p, "timers_pkey") {
			t.Errorf("%s: the table is scanned; plan:\n%s", c.Name, p)
		}
		t.Logf("%s:\n%s", c.Name, p)
	}
}

// TestDeadLetterFiltersUseIndexes: every filter of GET /v1/deadletters and
// the combinations users run (sqlqtest.DeadLetterListPlans) read a range of
// the dead-letter index DeadLettersSQL names for them and each one's event
// by its key, never a table whole, beside 45,000 pending deliveries.
func TestDeadLetterFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	setup := sqlqtest.FillDeadLettersSQL(n, func(k int) string { return fmt.Sprintf("generate_series(1, %d) AS k(g)", k) }, pgConcat)
	s := openForPlans(t, append(setup, `ANALYZE webhooks`, `ANALYZE events`, `ANALYZE webhook_deliveries`)...)
	for _, c := range sqlqtest.DeadLetterListPlans(n) {
		q, args := s.DeadLettersSQL(c.Filter)
		p := explain(t, s.pool, sqlq.Rebind(q), args...)
		uses := func(index string) bool {
			return index != "" && (strings.Contains(p, "Index Scan using "+index+" on webhook_deliveries") ||
				strings.Contains(p, "Index Only Scan using "+index+" on webhook_deliveries") || strings.Contains(p, "Bitmap Index Scan on "+index))
		}
		if !uses(c.Index) && !uses(c.Alt) {
			t.Errorf("%s: want a range of %s; plan:\n%s", c.Name, c.Index, p)
		}
		if strings.Contains(p, "Seq Scan") || strings.Contains(p, "webhook_deliveries_pkey") || strings.Contains(p, "webhook_deliveries_due") {
			t.Errorf("%s: a table, or every delivery, is scanned; plan:\n%s", c.Name, p)
		}
		t.Logf("%s:\n%s", c.Name, p)
	}
}
