package mysql

import (
	"testing"

	"github.com/hourglass/hourglass/store/internal/sourcesql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestExecAllCountsEachStatement: a close's statements go to the server as
// one packet and come back with each one's row count, in the source's
// transaction. Before, database/sql's result hid the counts, so every
// batch failed its pipelined try and ran again a statement at a time.
func TestExecAllCountsEachStatement(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{URL: mytest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := s.sourcePool.get(s.server.conf)
	if err != nil {
		t.Fatal(err)
	}
	d := sourceDialect{s, db}
	for _, q := range []string{`CREATE TABLE t (k BIGINT PRIMARY KEY, v INT NOT NULL)`, `INSERT INTO t VALUES (1, 0), (2, 0), (3, 0)`} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	stmts := []sourcesql.Stmt{
		{SQL: `UPDATE t SET v = 1 WHERE k = ?`, Args: []any{int64(1)}},
		{SQL: `UPDATE t SET v = 1 WHERE k = ?`, Args: []any{int64(9)}},
		{SQL: `UPDATE t SET v = 1 WHERE k >= ?`, Args: []any{2}},
	}
	err = d.InTx(t.Context(), sourcesql.WaitBatch, func(tx sourcesql.Querier) error {
		counts, at, err := tx.(sqlQuerier).ExecAll(t.Context(), stmts)
		if err != nil || at != -1 || len(counts) != 3 || counts[0] != 1 || counts[1] != 0 || counts[2] != 2 {
			t.Errorf("ExecAll = %v, %d, %v; want [1 0 2], -1, nil", counts, at, err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var sum int
	if err := db.QueryRowContext(t.Context(), `SELECT SUM(v) FROM t`).Scan(&sum); err != nil || sum != 3 {
		t.Fatalf("after commit: sum %d, %v; want 3 (every statement ran once)", sum, err)
	}
}
