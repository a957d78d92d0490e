package mysql

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq/sqlqtest"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestHistoryUsesIndexes: a history (GET /v1/orders/{id}/history) reads
// its subject's events through events_order_seq and their deliveries
// through webhook_deliveries_event, never a table whole, among 50,000
// events and deliveries.
func TestHistoryUsesIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	s, err := Open(t.Context(), Config{URL: mytest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, q := range append(sqlqtest.FillDeadLettersSQL(n, numbers, myConcat), `ANALYZE TABLE webhooks, events, webhook_deliveries`) {
		if _, err := s.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%.60s…: %v", q, err)
		}
	}
	q, args := s.HistoryEventsSQL(hourglass.HistoryParams{Subject: 777})
	for _, r := range explainRows(t, s.db, q, args...) {
		if r["key"] != "events_order_seq" || r["type"] != "ref" && r["type"] != "range" || strings.Contains(r["Extra"], "filesort") {
			t.Errorf("history's events read as %s through %q (%s), want a range of events_order_seq without a sort: %v", r["type"], r["key"], r["Extra"], r)
		}
		t.Logf("events: %v", r)
	}
	q, args = s.HistoryDeliveriesSQL([]int64{777, 778, 779}, hourglass.HistoryDeliveriesMax)
	for _, r := range explainRows(t, s.db, q, args...) {
		if r["key"] != "webhook_deliveries_event" || r["type"] != "ref" && r["type"] != "range" {
			t.Errorf("history's deliveries read as %s through %q, want webhook_deliveries_event: %v", r["type"], r["key"], r)
		}
		t.Logf("deliveries: %v", r)
	}
	for _, q := range []string{`INSERT INTO events (id, type, order_id, created_at) SELECT CONCAT('evt_s', g), 'source.closed', g, g FROM ` + numbers(100), `ANALYZE TABLE events`} {
		if _, err := s.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%.60s…: %v", q, err)
		}
	}
	q, args = s.SourceClosedEventsSQL(n/2, 500)
	for _, r := range explainRows(t, s.db, q, args...) {
		if r["key"] != "events_source_closed" || r["type"] != "ref" && r["type"] != "range" || strings.Contains(r["Extra"], "filesort") {
			t.Errorf("closed source rows read as %s through %q (%s), want a range of events_source_closed: %v", r["type"], r["key"], r["Extra"], r)
		}
		t.Logf("source closed: %v", r)
	}
}
