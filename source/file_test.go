package source_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/source"
)

const goodYAML = `sources:
  - name: shop_orders
    table: shop.orders
    key: id
    deadline: expire_at
    pending: "status = 'UNPAID'"
    close:
      - "UPDATE shop.orders SET status = 'CLOSED' WHERE id = :key AND status = 'UNPAID' AND expire_at <= NOW(3)"
      - "UPDATE shop.stock s JOIN shop.order_items i ON i.sku = s.sku SET s.available = s.available + i.qty WHERE i.order_id = :key"
    lock:
      - "SELECT sku FROM shop.stock WHERE sku IN (SELECT sku FROM shop.order_items WHERE order_id IN (:keys)) ORDER BY sku FOR UPDATE"
    before_close: https://pay.internal/hourglass/check
`

func TestLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(path, []byte(goodYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	srcs, err := source.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 1 || srcs[0].Name != "shop_orders" || srcs[0].Table != "shop.orders" || len(srcs[0].Close) != 2 || len(srcs[0].Lock) != 1 || srcs[0].BeforeClose == "" {
		t.Errorf("Load = %+v", srcs)
	}
	if srcs[0].RemindBefore != 0 {
		t.Errorf("RemindBefore %s without remind_before; want 0", srcs[0].RemindBefore)
	}
	srcs, err = source.Parse([]byte(strings.Replace(goodYAML, "key: id", "key: id\n    remind_before: 10m", 1)))
	if err != nil || srcs[0].RemindBefore != 10*time.Minute {
		t.Errorf("remind_before: 10m: %+v, %v; want RemindBefore 10m", srcs, err)
	}
	if _, err := source.Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "--sources") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestParseRefusals: each bad file is refused with one line naming what
// is wrong.
func TestParseRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, yaml, want string }{
		{"empty", ``, "empty"},
		{"no sources", `sources: []`, "no sources"},
		{"unknown key", strings.Replace(goodYAML, "key: id", "key: id\n    keys: id", 1), `line 5: sources[0]: unknown key "keys" (did you mean "key"?)`},
		{"typo", strings.Replace(goodYAML, "deadline: expire_at", "dedline: expire_at", 1), `line 5: sources[0]: unknown key "dedline" (did you mean "deadline"?); a source's keys are name, table, key, deadline`},
		{"top-level typo", strings.Replace(goodYAML, "sources:", "source:", 1), `line 1: unknown key "source" (did you mean "sources"?)`},
		{"a number as text", strings.Replace(goodYAML, "deadline: expire_at", "deadline: expire_at\n    before_close_max_failures: ten", 1), "line 6: sources[0].before_close_max_failures: want a whole number, got text `ten`"},
		{"close as a mapping", "sources:\n  - name: a\n    close:\n      a: b\n", "line 4: sources[0].close: want a list of SQL statements (- \"UPDATE …\"), got a mapping"},
		{"close as text", strings.Replace(goodYAML, "deadline: expire_at", "deadline: [a, b]", 1), "sources[0].deadline: want a string (quote it), got a list"},
		{"sources as a mapping", "sources:\n  name: x\n", "sources: want a list of sources (- name: …), got a mapping"},
		{"missing pending", strings.Replace(goodYAML, `    pending: "status = 'UNPAID'"`+"\n", "", 1), "pending is required"},
		{"bad name", strings.Replace(goodYAML, "shop_orders", "Shop-Orders", 1), "name"},
		{"bad table", strings.Replace(goodYAML, "table: shop.orders", "table: shop.orders; DROP TABLE x", 1), "table"},
		{"guard without :key", strings.Replace(goodYAML, "WHERE id = :key AND status", "WHERE status", 1), "must bind the row's key with :key"},
		{"lock without :keys", strings.Replace(goodYAML, "IN (:keys)", "IN (1)", 1), "source shop_orders: lock[0]: must bind the closing rows' keys with :keys"},
		{"lock with :key", strings.Replace(goodYAML, "IN (:keys)", "IN (:keys) AND order_id = :key", 1), "lock[0]: runs once for the whole batch: bind :keys (the list of keys), not :key"},
		{"five locks", strings.Replace(goodYAML, "    lock:\n", "    lock:\n"+strings.Repeat("      - \"SELECT 1 FROM shop.stock WHERE sku IN (:keys)\"\n", 4), 1), "lock: give at most 4 statements; got 5"},
		{"two statements", strings.Replace(goodYAML, "<= NOW(3)\"", "<= NOW(3); DELETE FROM shop.orders\"", 1), "one statement"},
		{"a comment", strings.Replace(goodYAML, "<= NOW(3)\"", "<= NOW(3) -- :key\"", 1), "no comments"},
		{"bad unit", strings.Replace(goodYAML, "deadline: expire_at", "deadline: expire_at\n    deadline_unit: s", 1), "deadline_unit"},
		{"bad before_close", strings.Replace(goodYAML, "https://pay.internal/hourglass/check", "ftp://x", 1), "before_close"},
		{"bad on_error", strings.Replace(goodYAML, "before_close:", "before_close_on_error: never\n    before_close:", 1), "before_close_on_error"},
		{"twice", goodYAML + strings.TrimPrefix(goodYAML, "sources:\n"), "used twice"},
		{"not yaml", "sources: [", "yaml"},
		{"remind_before not a duration", strings.Replace(goodYAML, "key: id", "key: id\n    remind_before: ten minutes", 1), `source shop_orders: remind_before: "ten minutes" is not a duration`},
		{"remind_before a bare number", strings.Replace(goodYAML, "key: id", "key: id\n    remind_before: 600", 1), `source shop_orders: remind_before: "600" is not a duration`},
		{"remind_before negative", strings.Replace(goodYAML, "key: id", "key: id\n    remind_before: -5m", 1), "source shop_orders: remind_before: must be 0 or absent (no reminder), or whole milliseconds from 1s to 168h0m0s (7 days), got -5m0s"},
		{"remind_before too long", strings.Replace(goodYAML, "key: id", "key: id\n    remind_before: 169h", 1), "source shop_orders: remind_before: must be 0 or absent"},
		{"remind_before too short", strings.Replace(goodYAML, "key: id", "key: id\n    remind_before: 10ms", 1), "source shop_orders: remind_before: must be 0 or absent"},
		{"remind_before not whole ms", strings.Replace(goodYAML, "key: id", "key: id\n    remind_before: 1.0005s", 1), "source shop_orders: remind_before: must be 0 or absent"},
	} {
		_, err := source.Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "fileSource") {
			t.Errorf("%s: Parse = %v; want one line with %q", c.name, err, c.want)
		}
	}
}
