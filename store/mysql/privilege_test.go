package mysql_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestLeastPrivilege is the README's least-privilege setup: an owner with
// DDL rights migrates (hourglass migrate), and the service runs as a user
// with SELECT, INSERT, UPDATE and DELETE only.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := mytest.NewDatabase(t)
	admin := mytest.Admin(t, dbURL)
	var db string
	if err := admin.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	suffix := strings.ToLower(rand.Text()[:8])
	owner, app := "hg_owner_"+suffix, "hg_app_"+suffix
	for _, q := range []string{
		"CREATE USER '" + owner + "'@'%' IDENTIFIED BY 'owner-pw'",
		"CREATE USER '" + app + "'@'%' IDENTIFIED BY 'app-pw'",
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP, REFERENCES ON `" + db + "`.* TO '" + owner + "'@'%'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `" + db + "`.* TO '" + app + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP USER IF EXISTS '" + owner + "'@'%'")
		admin.Exec("DROP USER IF EXISTS '" + app + "'@'%'")
	})
	if _, err := mysql.Migrate(ctx, mysql.Config{URL: withUser(t, dbURL, owner, "owner-pw")}); err != nil {
		t.Fatalf("migrate as the owner: %v", err)
	}
	s, err := mysql.Open(ctx, mysql.Config{URL: withUser(t, dbURL, app, "app-pw")})
	if err != nil {
		t.Fatalf("open as the DML-only user on a migrated database: %v", err)
	}
	defer s.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}}}); err != nil {
		t.Fatalf("create as the DML-only user: %v", err)
	}
}
