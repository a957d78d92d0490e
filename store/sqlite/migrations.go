package sqlite

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/hourglass/hourglass/store/migrate"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// The schema, one file per version; append, never edit. The version applied
// is kept in PRAGMA user_version (as before the files existed).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the store's migrations, in order.
func Migrations() ([]migrate.Migration, error) {
	return migrate.Load(migrationFiles, "migrations")
}

// target is migrate.Target on one connection. One process owns a SQLite
// file, so the lock is the write transaction each Apply takes, which
// re-checks the version inside it.
type target struct{ conn *sqlite.Conn }

func (t target) Lock(context.Context) (func() error, error) { return func() error { return nil }, nil }

func (t target) version() (int, error) {
	var v int
	err := sqlitex.ExecuteTransient(t.conn, "PRAGMA user_version", &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error { v = stmt.ColumnInt(0); return nil },
	})
	return v, err
}

func (t target) Applied(context.Context) ([]int, error) {
	v, err := t.version()
	if err != nil {
		return nil, err
	}
	out := make([]int, v)
	for i := range out {
		out[i] = i + 1
	}
	return out, nil
}

func (t target) Apply(_ context.Context, m migrate.Migration) (err error) {
	end, err := sqlitex.ImmediateTransaction(t.conn)
	if err != nil {
		return err
	}
	defer end(&err)
	v, err := t.version()
	if err != nil {
		return err
	}
	if v >= m.Version {
		return nil // applied meanwhile
	}
	if v != m.Version-1 {
		return fmt.Errorf("database is at version %d, cannot apply %d", v, m.Version)
	}
	if err := sqlitex.ExecuteScript(t.conn, m.SQL, nil); err != nil {
		return err
	}
	return sqlitex.ExecuteTransient(t.conn, fmt.Sprintf("PRAGMA user_version = %d", m.Version), nil)
}

// migrateConn applies the pending migrations on conn.
func migrateConn(ctx context.Context, conn *sqlite.Conn) error {
	ms, err := Migrations()
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if _, err := migrate.Up(ctx, target{conn}, ms); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// MigrationStatus returns every migration of the database in dir (file
// fileName, default FileNameDefault) with whether it is applied; it changes
// nothing. A database that does not exist yet has none applied.
func MigrationStatus(ctx context.Context, dir, fileName string) ([]migrate.Status, error) {
	if _, err := os.Stat(dbPath(dir, fileName)); errors.Is(err, fs.ErrNotExist) {
		ms, err := Migrations()
		if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		out := make([]migrate.Status, len(ms))
		for i, m := range ms {
			out[i] = migrate.Status{Migration: m}
		}
		return out, nil
	}
	conn, err := sqlite.OpenConn(dbPath(dir, fileName), sqlite.OpenReadOnly|sqlite.OpenURI)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", dbPath(dir, fileName), err)
	}
	defer conn.Close()
	ms, err := Migrations()
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	st, err := migrate.StatusOf(ctx, target{conn}, ms)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return st, nil
}
