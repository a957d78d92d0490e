package mysql

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
)

// The schema, one file per version; append, never edit. MySQL commits each
// DDL statement by itself, so a migration is not atomic: every statement is
// written to be run again (CREATE TABLE IF NOT EXISTS, INSERT IGNORE), and a
// migration interrupted half-way is completed by the next start.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the store's migrations, in order.
func Migrations() ([]migrate.Migration, error) {
	return migrate.Load(migrationFiles, "migrations")
}

// versionTable records the applied migrations.
const versionTable = "hourglass_schema_migrations"

// migrationLockWait is how long Open waits for another process's migration.
const migrationLockWait = 120 * time.Second

// target is migrate.Target on one dedicated connection: GET_LOCK is held by
// a connection, so the lock, the reads and the migrations all use it. On a
// Galera node, whose GET_LOCK locks that node alone, the lock is a lease
// row instead (galera.go).
type target struct {
	conn *sql.Conn
	lock string // the GET_LOCK name

	db      *sql.DB             // renews the Galera lease
	galera  bool                // the server is a Galera node (wsrep_on=ON)
	observe func(reason string) // Config.ObserveRetry, or nil
	// lockTimeout is each migration's lock_wait_timeout (zero:
	// migrate.LockTimeoutDefault); the package's tests shorten it.
	lockTimeout time.Duration
}

func newTarget(ctx context.Context, db *sql.DB, dbName string) (*target, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	name := "hourglass_migrate_" + dbName
	if len(name) > 64 { // GET_LOCK names are at most 64 characters
		sum := sha256.Sum256([]byte(dbName))
		name = "hourglass_migrate_" + hex.EncodeToString(sum[:16])
	}
	galera, _, err := galeraSettings(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &target{conn: conn, lock: name, db: db, galera: galera}, nil
}

// Lock takes GET_LOCK('hourglass_migrate_<db>'), which every process
// migrating the same database takes, waiting up to migrationLockWait; on
// Galera it takes the lease row of hourglass_migration_lock (leaseLock).
func (t *target) Lock(ctx context.Context) (func() error, error) {
	wait := migrationLockWait
	if d, ok := ctx.Deadline(); ok {
		wait = max(time.Until(d), time.Second)
	}
	if t.galera {
		return t.leaseLock(ctx, wait)
	}
	var got sql.NullInt64
	if err := t.conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, t.lock, int(wait.Seconds())).Scan(&got); err != nil {
		return nil, err
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, fmt.Errorf("another process has held the migration lock %q for %s; is a migration stuck?", t.lock, wait)
	}
	return func() error {
		// A background context: the lock must be released even when ctx
		// ended (else it lasts as long as the pooled connection).
		var released sql.NullInt64
		return t.conn.QueryRowContext(context.Background(), `SELECT RELEASE_LOCK(?)`, t.lock).Scan(&released)
	}, nil
}

// Applied implements migrate.Target.
func (t *target) Applied(ctx context.Context) ([]int, error) {
	// Looked up first, so that a user with only SELECT, INSERT, UPDATE and
	// DELETE can start on a database an owner migrated (CREATE TABLE IF
	// NOT EXISTS needs the CREATE privilege even when the table exists).
	var exists int
	if err := t.conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = ?`, versionTable).Scan(&exists); err != nil {
		return nil, err
	}
	if exists > 0 {
		return t.versions(ctx)
	}
	if _, err := t.conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+versionTable+` (
	version    INT NOT NULL,
	name       VARCHAR(255) NOT NULL,
	applied_at BIGINT NOT NULL,
	PRIMARY KEY (version)
) ENGINE = InnoDB`); err != nil {
		return nil, err
	}
	return t.versions(ctx)
}

// versions reads the applied versions, ascending.
func (t *target) versions(ctx context.Context) ([]int, error) {
	rows, err := t.conn.QueryContext(ctx, `SELECT version FROM `+versionTable+` ORDER BY version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Apply runs m's statements one by one, then records its version. A
// statement that fails because what it adds exists already (a duplicate
// column, from an ALTER TABLE … ADD COLUMN that a migration interrupted
// after it ran) counts as applied: MySQL 8 has no ADD COLUMN IF NOT EXISTS.
//
// Each statement waits at most lock_wait_timeout (seconds, at least 1) for
// a table's metadata lock: behind a long transaction it gives up with
// migrate.ErrLockTimeout instead of queuing, with every later statement on
// that table (other nodes' event writes) queued behind it.
func (t *target) Apply(ctx context.Context, m migrate.Migration) error {
	wait := cmp.Or(t.lockTimeout, migrate.LockTimeoutDefault)
	if _, err := t.conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", max(int((wait+time.Second-1)/time.Second), 1))); err != nil {
		return err
	}
	// The connection goes back to the pool: give it the server's default.
	defer t.conn.ExecContext(context.Background(), "SET SESSION lock_wait_timeout = DEFAULT")
	for i, stmt := range splitStatements(m.SQL) {
		if _, err := t.conn.ExecContext(ctx, stmt); err != nil && !alreadyApplied(err) {
			var me *gomysql.MySQLError
			if errors.As(err, &me) && me.Number == 1205 {
				return fmt.Errorf("statement %d gave up after waiting %s for a table lock (lock_wait_timeout): %w", i+1, wait, migrate.ErrLockTimeout)
			}
			return fmt.Errorf("statement %d: %w", i+1, err)
		}
	}
	_, err := t.conn.ExecContext(ctx, `INSERT IGNORE INTO `+versionTable+` (version, name, applied_at)
VALUES (?, ?, `+dbNowMs+`)`, m.Version, m.Name)
	return err
}

// alreadyApplied reports whether err is error 1060, "duplicate column
// name", or 1061, "duplicate key name": the column or index a migration
// adds exists.
func alreadyApplied(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1060 || me.Number == 1061)
}

// splitStatements cuts a migration into statements: comment lines are
// dropped and a statement ends with a ';' at the end of a line. (Our
// migrations put no ';' at a line's end inside a string.)
func splitStatements(script string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(script) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// migrateDB applies the pending migrations under the migration lock.
func migrateDB(ctx context.Context, db *sql.DB, cfg Config) (int, error) {
	ms, err := Migrations()
	if err != nil {
		return 0, fmt.Errorf("mysql: %w", err)
	}
	mc, _ := myurl.Parse(cfg.URL)
	t, err := newTarget(ctx, db, mc.DBName)
	if err != nil {
		return 0, migrationError(err, mc)
	}
	defer t.conn.Close()
	t.observe = cfg.ObserveRetry
	n, err := migrate.Up(ctx, t, ms)
	if err != nil {
		return n, migrationError(err, mc)
	}
	if err := ensureOwnColumns(ctx, t, cmp.Or(cfg.Logger, slog.Default())); err != nil {
		return n, fmt.Errorf("mysql: %w", err)
	}
	return n, nil
}

// MigrationStatus returns every migration with whether it is applied in the
// database at cfg.URL; it takes no lock and changes nothing but creating
// the empty version table of a new database. It fails with
// migrate.ErrSchemaNewer (wrapped) when the database is newer than this
// binary, and with Open's one-line errors when it cannot connect.
func MigrationStatus(ctx context.Context, cfg Config) ([]migrate.Status, error) {
	db, _, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ms, err := Migrations()
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	mc, _ := myurl.Parse(cfg.URL)
	t, err := newTarget(ctx, db, mc.DBName)
	if err != nil {
		return nil, migrationError(err, mc)
	}
	defer t.conn.Close()
	st, err := migrate.StatusOf(ctx, t, ms)
	if err != nil {
		return nil, migrationError(err, mc)
	}
	return st, nil
}

// migrationError is a migration failure in one line; a missing privilege
// says what to GRANT.
func migrationError(err error, mc *gomysql.Config) error {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1142, 1044, 1227, 1143:
			return fmt.Errorf("mysql: user %q cannot create hourglass's tables in %q (error %d: %s): GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX ON `%s`.* TO '%s'@'%%'",
				mc.User, mc.DBName, me.Number, me.Message, mc.DBName, mc.User)
		}
	}
	if errors.Is(err, migrate.ErrSchemaNewer) || errors.Is(err, migrate.ErrLockTimeout) {
		return fmt.Errorf("mysql: database %q on %s: %w", mc.DBName, mc.Addr, err)
	}
	return fail("migrate "+mc.DBName, err)
}
