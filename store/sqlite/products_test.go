package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/sqlite"
	zsqlite "zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// TestMigrationKeysProductsBySKU: migration 17 rebuilds products keyed by
// the SKU alone (no rowid) and keeps every product's fields, stock and
// constraints; creates then reserve from the rebuilt rows.
func TestMigrationKeysProductsBySKU(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	databaseAt(t, dir, 16, `INSERT INTO products (sku, name, category, available, reserved, sold) VALUES ('MUG-1', 'Mug', 'physical', 7, 2, 5), ('EBOOK', 'E-book', 'digital', 100, 0, 0);`)

	s := open(t, dir, hourglasstest.NewClock(hourglasstest.Epoch))
	for _, want := range []hourglass.Product{
		{SKU: "MUG-1", Name: "Mug", Category: "physical", Available: 7, Reserved: 2, Sold: 5},
		{SKU: "EBOOK", Name: "E-book", Category: "digital", Available: 100},
	} {
		if got, err := s.Product(ctx, want.SKU); err != nil || got != want {
			t.Errorf("Product(%s) after migration = %+v, %v; want %+v", want.SKU, got, err, want)
		}
	}
	if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "MUG-1", Quantity: 7}}, Timeout: time.Minute}); err != nil {
		t.Fatalf("create after migration: %v", err)
	}
	if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "MUG-1", Quantity: 1}}, Timeout: time.Minute}); hourglass.ErrorCode(err) != hourglass.CodeInsufficientStock {
		t.Fatalf("create beyond the stock after migration = %v, want %s", err, hourglass.CodeInsufficientStock)
	}
	if got, err := s.Product(ctx, "MUG-1"); err != nil || got.Available != 0 || got.Reserved != 9 {
		t.Fatalf("MUG-1 after the creates = %+v, %v; want 0 available, 9 reserved", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	conn, err := zsqlite.OpenConn(filepath.Join(dir, sqlite.FileNameDefault), zsqlite.OpenReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A WITHOUT ROWID table has no rowid to select.
	err = sqlitex.ExecuteTransient(conn, `SELECT rowid FROM products`, nil)
	if err == nil || !strings.Contains(err.Error(), "no such column") {
		t.Fatalf("SELECT rowid FROM products = %v, want no such column (a table keyed by SKU alone)", err)
	}
}

// databaseAt creates in dir the database an older hourglass left: the
// store's migrations up to version applied, its user_version set, then
// seed run on it. The store's Open then migrates it the rest of the way.
func databaseAt(t *testing.T, dir string, version int, seed string) {
	t.Helper()
	ms, err := sqlite.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := zsqlite.OpenConn(filepath.Join(dir, sqlite.FileNameDefault), zsqlite.OpenReadWrite|zsqlite.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:version] {
		if err := sqlitex.ExecuteScript(conn, m.SQL, nil); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	if err := sqlitex.ExecuteScript(conn, fmt.Sprintf("PRAGMA user_version = %d;\n%s", version, seed), nil); err != nil {
		t.Fatalf("version %d database: %v", version, err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
}
