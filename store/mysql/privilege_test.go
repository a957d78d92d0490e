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
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP, REFERENCES, TRIGGER ON `" + db + "`.* TO '" + owner + "'@'%'",
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

// TestPrivilegeCheckCoversEveryTable: a user granted every table but one
// (table-level GRANTs that left out fanout_pending) is refused at Open with
// a line naming the table and the GRANT to run, instead of starting and
// failing every write that defers a fan-out.
func TestPrivilegeCheckCoversEveryTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := mytest.NewDatabase(t)
	if _, err := mysql.Migrate(ctx, mysql.Config{URL: dbURL}); err != nil {
		t.Fatal(err)
	}
	admin := mytest.Admin(t, dbURL)
	var db string
	if err := admin.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	app := "hg_app_" + strings.ToLower(rand.Text()[:8])
	if _, err := admin.ExecContext(ctx, "CREATE USER '"+app+"'@'%' IDENTIFIED BY 'app-pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS '" + app + "'@'%'") })
	rows, err := admin.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, name := range tables {
		privileges := "SELECT, INSERT, UPDATE, DELETE"
		if name == "fanout_pending" {
			privileges = "SELECT, UPDATE, DELETE"
		}
		if _, err := admin.ExecContext(ctx, "GRANT "+privileges+" ON `"+db+"`.`"+name+"` TO '"+app+"'@'%'"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := mysql.Open(ctx, mysql.Config{URL: withUser(t, dbURL, app, "app-pw")})
	if err == nil {
		s.Close()
		t.Fatal("Open as a user who may not insert into fanout_pending succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "may not write fanout_pending in") || !strings.Contains(msg, "GRANT SELECT, INSERT, UPDATE, DELETE") || strings.Contains(msg, "app-pw") {
		t.Fatalf("Open: %q; want one line naming fanout_pending and the GRANT to run", msg)
	}
}
