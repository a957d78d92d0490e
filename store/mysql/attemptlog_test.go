package mysql

import (
	"testing"

	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestDeliveryAttemptsUseTheirIndex: a history's attempts are read along
// delivery_attempts_order, never the whole log, among 50,000 attempts of
// 5,000 subjects.
func TestDeliveryAttemptsUseTheirIndex(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{URL: mytest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, q := range []string{`INSERT INTO delivery_attempts (order_id, delivery_id, webhook_id, event_id, event_type, attempt, at, duration_ms, status_code, outcome, error)
SELECT g % 5000, g, 1, CONCAT('evt_', g), 'order.created', 1, 1700000000000 + g, 5, 500, 'retry', 'HTTP 500' FROM ` + numbers(50000),
		`ANALYZE TABLE delivery_attempts`} {
		if _, err := s.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%.60s…: %v", q, err)
		}
	}
	q, args := s.DeliveryAttemptsSQL(42, 1000)
	for _, r := range explainRows(t, s.db, q, args...) {
		if r["key"] != "delivery_attempts_order" || (r["type"] != "ref" && r["type"] != "range") {
			t.Errorf("a subject's attempts read as %s through %q, want a ref of delivery_attempts_order: %v", r["type"], r["key"], r)
		}
	}
}
