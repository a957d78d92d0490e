package postgres

import (
	"fmt"
	"strings"
	"testing"
)

// TestProductLocksAreLookUps: a batch locks its products by primary-key
// look-ups, one per SKU, and updates them reading only its SKUs, in the
// custom plan and in the generic plan alike,
// on a products table small enough (1,000 rows) for the planner to prefer
// scanning it whole: the lock is paid once per commit, and several nodes
// commit smaller batches more often.
func TestProductLocksAreLookUps(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openForPlans(t, thousandProducts...)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	skus := make([]string, 20) // sorted, as the writer passes them
	for i := range skus {
		skus[i] = fmt.Sprintf("sku-%05d", 1+i*37)
	}
	arg := "'{" + strings.Join(skus, ",") + "}'"
	for i, st := range []struct{ name, sql string }{{"productsLockSQL", productsLockSQL}} {
		if _, err := conn.Exec(ctx, fmt.Sprintf("PREPARE lock%d(text[]) AS %s", i, st.sql)); err != nil {
			t.Fatalf("prepare %s: %v", st.name, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			p := explain(t, conn, fmt.Sprintf("EXECUTE lock%d(%s)", i, arg))
			if !strings.Contains(p, "Index Scan using products_pkey") || strings.Contains(p, "Seq Scan") {
				t.Errorf("%s, %s: want one look-up of products_pkey per SKU, not a scan of the table; plan:\n%s", st.name, mode, p)
			}
		}
	}
	// The stock UPDATE: the products it reads are the batch's SKUs (an
	// index scan, or a scan that filters by them), not every product
	// hashed for a join.
	deltas := "'{" + strings.Repeat("1,", len(skus)-1) + "1}'"
	if _, err := conn.Exec(ctx, "PREPARE upd(text[], bigint[], bigint[], bigint[]) AS "+productsUpdateSQL); err != nil {
		t.Fatalf("prepare productsUpdateSQL: %v", err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		p := explain(t, conn, fmt.Sprintf("EXECUTE upd(%s, %s, %s, %s)", arg, deltas, deltas, deltas))
		lines := strings.Split(p, "\n")
		restricted := false
		for i, l := range lines {
			if strings.Contains(l, " on products p") && i+1 < len(lines) {
				restricted = strings.Contains(lines[i+1], "sku = ANY (")
			}
		}
		if !restricted {
			t.Errorf("productsUpdateSQL, %s: want the products read by the batch's SKUs, not all of them; plan:\n%s", mode, p)
		}
	}
}
