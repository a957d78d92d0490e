package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// openForPlans opens a store on a new database, with two connections, and
// runs the setup statements on it: the plan tests fill its tables by SQL
// and read their statements' plans (explain).
func openForPlans(t testing.TB, setup ...string) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{URL: pgtest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, q := range setup {
		if _, err := s.pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return s
}

// thousandProducts fills products with 1,000 rows, sku-00001 to sku-01000,
// and analyzes it: a table small enough for the planner to prefer scanning
// it whole.
var thousandProducts = []string{
	`INSERT INTO products (sku, name, category, available) SELECT 'sku-' || lpad(g::text, 5, '0'), 'n', 'c', 1000 FROM generate_series(1, 1000) g`,
	`ANALYZE products`,
}

// explain returns the plan of "EXPLAIN " + sql on q, one line each.
func explain(t *testing.T, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, sql string, args ...any) string {
	t.Helper()
	rows, err := q.Query(t.Context(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	return b.String()
}
