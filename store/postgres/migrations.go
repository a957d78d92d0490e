package postgres

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass/hourglass/store/migrate"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema, one file per version; append, never edit.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the store's migrations, in order.
func Migrations() ([]migrate.Migration, error) {
	return migrate.Load(migrationFiles, "migrations")
}

// migrationLockKey is the session advisory lock every process takes to
// migrate a database (advisory locks are per database).
const migrationLockKey int64 = 0x686f7572_676c6173 // "hourglas"

// target is migrate.Target on PostgreSQL: the lock is a session advisory
// lock held on one dedicated connection, on which the migrations then run;
// each migration and its version row commit in one transaction.
type target struct {
	pool *pgxpool.Pool
	conn *pgxpool.Conn // the locked connection, between Lock and unlock
	// lockTimeout is each migration's lock_timeout (zero:
	// migrate.LockTimeoutDefault); the package's tests shorten it.
	lockTimeout time.Duration
}

// Lock implements migrate.Target.
func (t *target) Lock(ctx context.Context) (func() error, error) {
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		c.Release()
		return nil, err
	}
	t.conn = c
	return func() error {
		defer func() { t.conn = nil; c.Release() }()
		_, err := c.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, migrationLockKey)
		if err != nil {
			c.Conn().Close(context.Background()) // a lost lock is released with its session
		}
		return err
	}, nil
}

// query runs on the locked connection if any, else the pool (status reads).
func (t *target) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.conn != nil {
		return t.conn.Query(ctx, sql, args...)
	}
	return t.pool.Query(ctx, sql, args...)
}

// Applied implements migrate.Target. Under the lock it creates the version
// table when missing; without it (MigrationStatus) it changes nothing. The
// table is looked up first so a user without CREATE on the schema can run a
// database its owner migrated.
func (t *target) Applied(ctx context.Context) ([]int, error) {
	var exists bool
	rows, err := t.query(ctx, `SELECT to_regclass('hourglass_schema_migrations') IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	exists, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if err != nil {
		return nil, err
	}
	if !exists {
		if t.conn == nil {
			return nil, nil
		}
		if _, err := t.conn.Exec(ctx, `CREATE TABLE hourglass_schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
)`); err != nil {
			return nil, err
		}
	}
	rows, err = t.query(ctx, `SELECT version FROM hourglass_schema_migrations ORDER BY version`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// Apply implements migrate.Target: the migration's statements and its
// version row in one transaction on the locked connection.
func (t *target) Apply(ctx context.Context, m migrate.Migration) error {
	if t.conn == nil {
		return errors.New("apply without the migration lock")
	}
	wait := cmp.Or(t.lockTimeout, migrate.LockTimeoutDefault)
	err := pgx.BeginFunc(ctx, t.conn, func(tx pgx.Tx) error {
		// A statement that waits longer than this for a table lock fails
		// (55P03) instead of queuing behind a long transaction, with every
		// later statement on that table (other nodes' event writes) queued
		// behind it.
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(wait.Milliseconds(), 1))); err != nil {
			return err
		}
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM hourglass_schema_migrations WHERE version = $1)`, m.Version).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil // applied meanwhile (cannot happen under the lock; harmless)
		}
		// No arguments: the simple protocol, which runs several statements.
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO hourglass_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
		return err
	})
	if pgCode(err) == "55P03" { // lock_not_available: rolled back, nothing applied
		return fmt.Errorf("gave up after waiting %s for a table lock (lock_timeout): %w", wait, migrate.ErrLockTimeout)
	}
	return err
}

// migrate applies the pending migrations under the advisory lock.
func (s *Store) migrate(ctx context.Context) (int, error) {
	ms, err := Migrations()
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	n, err := migrate.Up(ctx, &target{pool: s.pool}, ms)
	if err != nil {
		if errors.Is(err, migrate.ErrSchemaNewer) || errors.Is(err, migrate.ErrLockTimeout) {
			return n, fmt.Errorf("postgres: %s: %w", s.where, err)
		}
		return n, s.startupError("migrate", err)
	}
	return n, nil
}

// Migrate connects and applies the pending migrations, returning how many it
// applied; Open does the same. Safe to run from several processes at once.
func Migrate(ctx context.Context, cfg Config) (applied int, err error) {
	s, err := connect(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer s.pool.Close()
	return s.migrate(ctx)
}

// MigrationStatus returns every migration with whether it is applied. It
// takes no lock and changes nothing. It fails with migrate.ErrSchemaNewer
// (wrapped) when the database is newer than this binary.
func MigrationStatus(ctx context.Context, cfg Config) ([]migrate.Status, error) {
	s, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.pool.Close()
	ms, err := Migrations()
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	st, err := migrate.StatusOf(ctx, &target{pool: s.pool}, ms)
	if err != nil {
		if errors.Is(err, migrate.ErrSchemaNewer) {
			return nil, fmt.Errorf("postgres: %s: %w", s.where, err)
		}
		return nil, s.startupError("migration status", err)
	}
	return st, nil
}
