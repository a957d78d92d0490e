package postgres

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/sqlq/sqlqtest"
)

// TestHistoryUsesIndexes: a history (GET /v1/orders/{id}/history) reads
// its subject's events through events_order_seq and their deliveries
// through webhook_deliveries_event, never a table whole, among 50,000
// events and deliveries.
func TestHistoryUsesIndexes(t *testing.T) {
	t.Parallel()
	const n = 50000
	setup := sqlqtest.FillDeadLettersSQL(n, func(k int) string { return fmt.Sprintf("generate_series(1, %d) AS k(g)", k) }, pgConcat)
	s := openForPlans(t, append(setup, `ANALYZE webhooks`, `ANALYZE events`, `ANALYZE webhook_deliveries`)...)
	q, args := s.HistoryEventsSQL(hourglass.HistoryParams{Subject: 777})
	p := explain(t, s.pool, sqlq.Rebind(q), args...)
	if !strings.Contains(p, "events_order_seq") || strings.Contains(p, "Seq Scan") || strings.Contains(p, "Sort") {
		t.Errorf("history's events: want a backward range of events_order_seq, no sort; plan:\n%s", p)
	}
	t.Logf("events:\n%s", p)
	q, args = s.HistoryDeliveriesSQL([]int64{777, 778, 779}, hourglass.HistoryDeliveriesMax)
	p = explain(t, s.pool, sqlq.Rebind(q), args...)
	if !strings.Contains(p, "webhook_deliveries_event") || strings.Contains(p, "Seq Scan") {
		t.Errorf("history's deliveries: want webhook_deliveries_event; plan:\n%s", p)
	}
	t.Logf("deliveries:\n%s", p)
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO events (id, type, order_id, created_at) SELECT 'evt_s' || g, 'source.closed', g, g FROM generate_series(1, 100) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(t.Context(), `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	q, args = s.SourceClosedEventsSQL(n/2, 500)
	p = explain(t, s.pool, sqlq.Rebind(q), args...)
	if !strings.Contains(p, "events_source_closed") || strings.Contains(p, "Seq Scan") {
		t.Errorf("closed source rows: want events_source_closed; plan:\n%s", p)
	}
	t.Logf("source closed:\n%s", p)
}
