package mysql_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestMigrationsRerun: MySQL's DDL commits by itself, so a migration cut
// off after some statements is run again whole at the next start; every
// migration must then succeed on a schema that already has what it adds
// (a column: error 1060; an index: 1061). Here every version is forgotten
// and applied again.
func TestMigrationsRerun(t *testing.T) {
	t.Parallel()
	u := mytest.NewDatabase(t)
	open(t, u, nil, false).Close()
	if _, err := mytest.Admin(t, u).Exec(`DELETE FROM hourglass_schema_migrations`); err != nil {
		t.Fatal(err)
	}
	n, err := mysql.Migrate(context.Background(), mysql.Config{URL: u})
	ms, _ := mysql.Migrations()
	if err != nil || n != len(ms) {
		t.Fatalf("Migrate again = %d, %v; want all %d applied again", n, err, len(ms))
	}
}
