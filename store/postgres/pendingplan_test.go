package postgres

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// TestPendingDeliveriesReadByKey: the batch read of pending deliveries
// looks each one up by its primary key (Dialect.ByID), never through the
// (state, next_attempt_at) index, which a burst fills with pending rows.
func TestPendingDeliveriesReadByKey(t *testing.T) {
	s := openForPlans(t)
	query, args := s.PendingDeliveriesSQL([]int64{1, 2, 3, 4, 5, 6, 7, 8})
	plan := explain(t, s.pool, sqlq.Rebind(query), args...)
	if !strings.Contains(plan, "webhook_deliveries_pkey") || strings.Contains(plan, "webhook_deliveries_due") ||
		strings.Contains(plan, "Seq Scan on webhook_deliveries") {
		t.Errorf("the deliveries are not read by their primary key:\n%s", plan)
	}
}
