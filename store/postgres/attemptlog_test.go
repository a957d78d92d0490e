package postgres

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// TestDeliveryAttemptsUseTheirIndex: a history's attempts are read along
// delivery_attempts_order, never the whole log, among 50,000 attempts of
// 5,000 subjects.
func TestDeliveryAttemptsUseTheirIndex(t *testing.T) {
	t.Parallel()
	s := openForPlans(t, `INSERT INTO delivery_attempts (order_id, delivery_id, webhook_id, event_id, event_type, attempt, at, duration_ms, status_code, outcome, error)
SELECT g % 5000, g, 1, 'evt_' || g, 'order.created', 1, 1700000000000 + g, 5, 500, 'retry', 'HTTP 500' FROM generate_series(1, 50000) AS k(g)`,
		`ANALYZE delivery_attempts`)
	q, args := s.DeliveryAttemptsSQL(42, 1000)
	p := explain(t, s.pool, sqlq.Rebind(q), args...)
	if !strings.Contains(p, "delivery_attempts_order") || strings.Contains(p, "Seq Scan") {
		t.Errorf("a subject's attempts are not read along delivery_attempts_order; plan:\n%s", p)
	}
}
