package sqlite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq/sqlqtest"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// TestOrderFiltersUseIndexes: every filter of GET /v1/orders and the
// combinations users run (sqlqtest.OrderListPlans) search a range of the index
// ListOrdersSQL names for them (EXPLAIN QUERY PLAN), never scan the orders
// table or an index whole, on 10,000 orders (enough for the planner to
// prefer each index: it fails with one dropped; 50,000 cost 2 minutes
// under -race in CI).
func TestOrderFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 10000
	s := openAt(t, nil)
	fillOrders(t, s, n)
	for _, c := range sqlqtest.OrderListPlans(n) {
		q, args := s.ListOrdersSQL(c.Filter)
		plan := queryPlan(t, s, q, args...)
		searches := 0
		for _, line := range plan {
			if !strings.HasPrefix(line, "SEARCH orders") && !strings.HasPrefix(line, "SCAN orders") {
				continue // the merge of a union's arms, a page each at most
			}
			searches++
			if !strings.HasPrefix(line, "SEARCH orders USING INDEX "+c.Index+" (") && !strings.HasPrefix(line, "SEARCH orders USING COVERING INDEX "+c.Index+" (") {
				t.Errorf("%s: %q, want a search of a range of %s", c.Name, line, c.Index)
			}
		}
		if searches == 0 {
			t.Errorf("%s: the plan reads no orders:\n%s", c.Name, strings.Join(plan, "\n"))
		}
		t.Logf("%s:\n%s", c.Name, strings.Join(plan, "\n"))
	}
}

// fillOrders fills orders with n rows as sqlqtest.OrderListPlans describes,
// and analyzes it.
func fillOrders(tb testing.TB, s *Store, n int) {
	tb.Helper()
	numbers := fmt.Sprintf(`(WITH RECURSIVE k(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM k WHERE g < %d) SELECT g FROM k) k`, n)
	err := s.write(tb.Context(), func(conn *sqlite.Conn, _ time.Time) error {
		if err := sqlitex.ExecuteTransient(conn, sqlqtest.FillOrdersSQL(n, numbers, func(a, b string) string { return a + " || " + b }), nil); err != nil {
			return err
		}
		return sqlitex.ExecuteTransient(conn, `ANALYZE orders`, nil)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// queryPlan returns the details of EXPLAIN QUERY PLAN query, a line each.
func queryPlan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	var plan []string
	err := s.read(t.Context(), func(conn *sqlite.Conn) error {
		rows, err := connQuerier{conn}.Query(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var id, parent, unused int64
		var detail string
		for rows.Next() {
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				return err
			}
			plan = append(plan, detail)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// BenchmarkListOrders reads pages of each filter of GET /v1/orders over
// sqlqtest.BenchOrderListSize orders (HOURGLASS_BENCH_ORDER_LIST; the
// figures in BENCHMARKS.md are of 1,000,000).
func BenchmarkListOrders(b *testing.B) {
	n := sqlqtest.BenchOrderListSize(b)
	s := openAt(b, nil)
	fillOrders(b, s, n)
	sqlqtest.BenchOrderLists(b, n, s.ListOrders)
}

// TestTimerFiltersUseIndexes: every filter of GET /v1/timers and the
// combinations users run (sqlqtest.TimerListPlans) search a range of the
// index Timers names for them, never scan the timers table or an index
// whole, on 10,000 timers.
func TestTimerFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 10000
	s := openAt(t, nil)
	numbers := fmt.Sprintf(`(WITH RECURSIVE k(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM k WHERE g < %d) SELECT g FROM k) k`, n)
	err := s.write(t.Context(), func(conn *sqlite.Conn, _ time.Time) error {
		if err := sqlitex.ExecuteTransient(conn, sqlqtest.FillTimersSQL(numbers, "key", "X'00'", func(a, b string) string { return a + " || " + b }), nil); err != nil {
			return err
		}
		return sqlitex.ExecuteTransient(conn, `ANALYZE timers`, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sqlqtest.TimerListPlans(n) {
		q, args, err := s.TimersSQL(c.Filter)
		if err != nil {
			t.Fatal(err)
		}
		index := c.Index
		if c.Key {
			index = "sqlite_autoindex_timers_1"
		}
		plan := queryPlan(t, s, q, args...)
		searches := 0
		for _, line := range plan {
			if !strings.HasPrefix(line, "SEARCH timers") && !strings.HasPrefix(line, "SCAN timers") {
				continue
			}
			searches++
			if !strings.HasPrefix(line, "SEARCH timers USING INDEX "+index+" (") && !strings.HasPrefix(line, "SEARCH timers USING COVERING INDEX "+index+" (") {
				t.Errorf("%s: %q, want a search of a range of %s", c.Name, line, index)
			}
		}
		if searches == 0 {
			t.Errorf("%s: the plan reads no timers:\n%s", c.Name, strings.Join(plan, "\n"))
		}
		t.Logf("%s:\n%s", c.Name, strings.Join(plan, "\n"))
	}
}

// TestDeadLetterFiltersUseIndexes: every filter of GET /v1/deadletters and
// the combinations users run (sqlqtest.DeadLetterListPlans) search a range
// of the dead-letter index DeadLettersSQL names for them and each one's
// event by its key, beside 9,000 pending deliveries.
func TestDeadLetterFiltersUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 10000
	s := openAt(t, nil)
	numbers := func(k int) string {
		return fmt.Sprintf(`(WITH RECURSIVE k(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM k WHERE g < %d) SELECT g FROM k) k`, k)
	}
	err := s.write(t.Context(), func(conn *sqlite.Conn, _ time.Time) error {
		for _, q := range append(sqlqtest.FillDeadLettersSQL(n, numbers, func(a, b string) string { return a + " || " + b }), `ANALYZE`) {
			if err := sqlitex.ExecuteTransient(conn, q, nil); err != nil {
				return fmt.Errorf("%.60s…: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sqlqtest.DeadLetterListPlans(n) {
		q, args := s.DeadLettersSQL(c.Filter)
		plan := queryPlan(t, s, q, args...)
		read := false
		for _, line := range plan {
			switch {
			case strings.HasPrefix(line, "SEARCH d ") || strings.HasPrefix(line, "SCAN d"):
				read = true
				if !strings.HasPrefix(line, "SEARCH d USING INDEX "+c.Index+" (") && !strings.HasPrefix(line, "SEARCH d USING COVERING INDEX "+c.Index+" (") &&
					line != "SCAN d USING INDEX "+c.Index && line != "SCAN d USING COVERING INDEX "+c.Index {
					t.Errorf("%s: %q, want a range of %s", c.Name, line, c.Index)
				}
			case strings.HasPrefix(line, "SEARCH e ") || strings.HasPrefix(line, "SCAN e"):
				if !strings.HasPrefix(line, "SEARCH e USING INTEGER PRIMARY KEY") {
					t.Errorf("%s: %q, want each event by its key", c.Name, line)
				}
			}
		}
		if !read {
			t.Errorf("%s: the plan reads no deliveries:\n%s", c.Name, strings.Join(plan, "\n"))
		}
		t.Logf("%s:\n%s", c.Name, strings.Join(plan, "\n"))
	}
}

// TestHistoryReadsOneSubjectsEvents: a history reads its subject's events
// from a range of events_order_seq, latest first in the index's own order
// (the seq is the rowid every entry ends in), never sorting them, and
// answers the latest ones in the order they happened.
func TestHistoryReadsOneSubjectsEvents(t *testing.T) {
	t.Parallel()
	s := openAt(t, nil)
	err := s.write(t.Context(), func(conn *sqlite.Conn, _ time.Time) error {
		if err := sqlitex.ExecuteTransient(conn, `INSERT INTO events (id, type, order_id, created_at)
SELECT 'evt_' || g, 'order.created', g % 1000, g FROM (WITH RECURSIVE k(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM k WHERE g < 10000) SELECT g FROM k)`, nil); err != nil {
			return err
		}
		return sqlitex.ExecuteTransient(conn, `ANALYZE events`, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	q, args := s.HistoryEventsSQL(hourglass.HistoryParams{Subject: 7, MaxEvents: 5})
	plan := queryPlan(t, s, q, args...)
	if len(plan) != 1 || !strings.HasPrefix(plan[0], "SEARCH events USING INDEX events_order_seq (order_id=?)") {
		t.Fatalf("history's events plan:\n%s\nwant one search of events_order_seq's range, no sort", strings.Join(plan, "\n"))
	}
	h, err := s.History(t.Context(), hourglass.HistoryParams{Subject: 7, MaxEvents: 5})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, e := range h.Events {
		seqs = append(seqs, e.Seq)
	}
	if want := []int64{5007, 6007, 7007, 8007, 9007}; fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Fatalf("history's event seqs = %v, want %v (the latest five, in order)", seqs, want)
	}
}
