package mysql

import (
	"context"
	"database/sql"
	"testing"

	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestPendingDeliveriesReadByKey: the batch read of pending deliveries
// looks each one up by its primary key (Dialect.ByKey), never through the
// (state, next_attempt_at) index, which a burst fills with pending rows.
func TestPendingDeliveriesReadByKey(t *testing.T) {
	s, err := Open(context.Background(), Config{URL: mytest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	query, args := s.PendingDeliveriesSQL([]int64{1, 2, 3, 4, 5, 6, 7, 8})
	rows, err := s.db.QueryContext(t.Context(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	found := false
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
		switch row["table"] {
		case "d":
			found = true
			if row["key"] != "PRIMARY" {
				t.Errorf("the deliveries are read through key %q, not by their primary key: %v", row["key"], row)
			}
		case "h": // the stream's earlier pending delivery: one seek
			if row["key"] == "" {
				t.Errorf("the stream's earlier delivery is read through no index: %v", row)
			}
		}
		t.Log(row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Error("no plan row for the deliveries (d)")
	}
}
