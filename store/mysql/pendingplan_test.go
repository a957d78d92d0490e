package mysql

import (
	"context"
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
	found := false
	for _, row := range explainRows(t, s.db, query, args...) {
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
	if !found {
		t.Error("no plan row for the deliveries (d)")
	}
}
