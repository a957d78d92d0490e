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
	for i, st := range []struct{ name, sql, param, arg string }{
		{"productsLockSQL", productsLockSQL, "text[]", arg},
		{"productLockSQL", productLockSQL, "text", "'" + skus[3] + "'"},
	} {
		if _, err := conn.Exec(ctx, fmt.Sprintf("PREPARE lock%d(%s) AS %s", i, st.param, st.sql)); err != nil {
			t.Fatalf("prepare %s: %v", st.name, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			p := explain(t, conn, fmt.Sprintf("EXECUTE lock%d(%s)", i, st.arg))
			if !strings.Contains(p, "Index Scan using products_pkey") || strings.Contains(p, "Seq Scan") {
				t.Errorf("%s, %s: want one look-up of products_pkey per SKU, not a scan of the table; plan:\n%s", st.name, mode, p)
			}
		}
	}
	// The stock UPDATE: the products it reads are the batch's SKUs (an
	// index scan, or a scan that filters by them), not every product
	// hashed for a join.
	deltas := "'{" + strings.Repeat("1,", len(skus)-1) + "1}'"
	for i, st := range []struct{ name, sql string }{
		{"productsUpdateSQL", productsUpdateSQL}, {"productsUpdateFewSQL", productsUpdateFewSQL}, {"productUpdateSQL", productUpdateSQL},
	} {
		if _, err := conn.Exec(ctx, fmt.Sprintf("PREPARE upd%d(text[], bigint[], bigint[], bigint[]) AS %s", i, st.sql)); err != nil {
			t.Fatalf("prepare %s: %v", st.name, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			p := explain(t, conn, fmt.Sprintf("EXECUTE upd%d(%s, %s, %s, %s)", i, arg, deltas, deltas, deltas))
			lines := strings.Split(p, "\n")
			restricted := false
			for i, l := range lines {
				if strings.Contains(l, " on products p") && i+1 < len(lines) {
					restricted = strings.Contains(lines[i+1], "sku = ANY (") || strings.Contains(lines[i+1], "Index Cond: (sku = ")
				}
			}
			if !restricted {
				t.Errorf("%s, %s: want the products read by the batch's SKUs, not all of them; plan:\n%s", st.name, mode, p)
			}
		}
	}
}

// TestProductsUpdateForms: both forms of the stock update add each SKU's
// own deltas to its own row, and touch no other row.
func TestProductsUpdateForms(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openForPlans(t, thousandProducts...)
	for f, sql := range []string{productsUpdateSQL, productsUpdateFewSQL, productUpdateSQL} {
		// Sorted SKUs, each with its own deltas, as UpdateProducts passes them.
		var skus []string
		var da, dr, ds []int64
		n := 5
		if sql == productUpdateSQL {
			n = 1
		}
		for i := range n {
			skus = append(skus, fmt.Sprintf("sku-%05d", 100*f+3+i*11))
			da, dr, ds = append(da, int64(-1-i)), append(dr, int64(10+i)), append(ds, int64(100*i))
		}
		if _, err := s.pool.Exec(ctx, sql, skus, da, dr, ds); err != nil {
			t.Fatalf("form %d: %v", f, err)
		}
		rows, err := s.pool.Query(ctx, `SELECT sku, available, reserved, sold FROM products WHERE available <> 1000 OR reserved <> 0 OR sold <> 0 ORDER BY sku`)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var (
				sku     string
				a, r, o int64
			)
			if err := rows.Scan(&sku, &a, &r, &o); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s %d %d %d", sku, a, r, o))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var want []string
		for i, sku := range skus {
			want = append(want, fmt.Sprintf("%s %d %d %d", sku, 1000+da[i], dr[i], ds[i]))
		}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Errorf("form %d: changed rows\n got %v\nwant %v", f, got, want)
		}
		if _, err := s.pool.Exec(ctx, `UPDATE products SET available = 1000, reserved = 0, sold = 0`); err != nil {
			t.Fatal(err)
		}
	}
}
