// Package storetest gives integration tests a new, empty database of the
// store they run on (testenv.Store: a case of testenv.EveryCase, or the one
// HOURGLASS_TEST_STORE names: sqlite, the default; postgres; mysql), so the
// same end-to-end, crash and race tests run on every store.
package storetest

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// Kind returns the store a developer's run names: HOURGLASS_TEST_STORE,
// default sqlite. A test inside testenv.EveryCase reads its own with
// testenv.Store.
func Kind() string { return cmp.Or(os.Getenv(testenv.StoreEnv), store.KindSQLite) }

// URL returns the --database-url of a new, empty database of the store t
// runs on (testenv.Store), which
// t.Cleanup drops: a file in t.TempDir() for SQLite, a database of its own
// on the test server for PostgreSQL and MySQL (HOURGLASS_TEST_POSTGRES_URL,
// HOURGLASS_TEST_MYSQL_URL). The test is skipped with a message when the
// server is absent, and fails when CI=true. An unknown kind fails the test.
// A Default-tier test is skipped in a run that does not cover that tier
// (testenv.RequireDefault).
func URL(t testing.TB) string {
	t.Helper()
	testenv.RequireDefault(t)
	kind := testenv.Store(t, store.KindSQLite)
	switch kind {
	case store.KindSQLite:
		return "sqlite://" + filepath.Join(t.TempDir(), "hourglass.db")
	case store.KindPostgres:
		return pgtest.NewDatabase(t)
	case store.KindMySQL:
		return mytest.NewDatabase(t)
	}
	t.Fatalf("store %q: want sqlite, postgres or mysql (%s)", kind, testenv.StoreEnv)
	return ""
}

// PostgresMigrated is the pgtest template of a database postgres.Migrate
// brought to the current schema, with hourglass's tables in schema (""
// for public): a store opened on a copy (pgtest.NewDatabaseFrom) finds
// every migration applied, as on a new database it migrated itself.
func PostgresMigrated(schema string) pgtest.Template {
	return pgtest.Template{
		Key: "postgres.Migrate, schema " + schema,
		Prepare: func(ctx context.Context, url string) error {
			_, err := postgres.Migrate(ctx, postgres.Config{URL: url, Schema: schema, MaxConns: 2})
			return err
		},
	}
}

// MySQLMigrated is the mytest template of a database mysql.Migrate
// brought to the current schema (its trigger included): a store opened on
// a copy (mytest.NewDatabaseFrom) finds every migration applied, as on a
// new database it migrated itself.
func MySQLMigrated() mytest.Template {
	return mytest.Template{
		Key: "mysql.Migrate",
		Prepare: func(ctx context.Context, url string) error {
			_, err := mysql.Migrate(ctx, mysql.Config{URL: url, MaxConns: 2})
			return err
		},
	}
}
