package migrate

import (
	"slices"
	"testing"
)

func TestTables(t *testing.T) {
	t.Parallel()
	ms := []Migration{
		{Version: 1, SQL: "CREATE TABLE products (sku TEXT);\ncreate table IF NOT EXISTS `Orders` (id INT);"},
		{Version: 2, SQL: `CREATE TABLE "fanout_pending" (id INT); CREATE INDEX x ON products (sku); ALTER TABLE products ADD c INT;`},
		{Version: 3, SQL: "CREATE TABLE products (sku TEXT)"},
	}
	if got, want := Tables(ms), []string{"fanout_pending", "orders", "products"}; !slices.Equal(got, want) {
		t.Fatalf("Tables = %v, want %v", got, want)
	}
}
