// Package store opens the database of record named by a URL, as package
// delay opens a delay mechanism by name: SQLite (embedded, the default),
// PostgreSQL or MySQL/MariaDB. It is the one place outside the store
// packages that knows which stores exist; cmd/hourglass and the benchmark
// call it and see only hourglass.Database.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/sqlite"
)

// Kinds of store, as Kind returns them.
const (
	KindSQLite   = "sqlite"
	KindPostgres = "postgres"
	KindMySQL    = "mysql"
)

// Options configures Open. The zero value of each field means its default.
type Options struct {
	// URL names the database: empty for SQLite in DataDir;
	// sqlite:///abs/path/file.db; postgres:// or postgresql://…; mysql://….
	URL string
	// DataDir holds the SQLite file when URL is empty.
	DataDir string
	// MaxConns sizes the connection pool of PostgreSQL and MySQL (0: the
	// store's default); SQLite ignores it.
	MaxConns int
	// Clock is for tests: nil means the database's own clock (the server's
	// for PostgreSQL and MySQL, the process's for SQLite).
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Outbox makes every created order write its timer to the outbox, for
	// a delay mechanism outside the database.
	Outbox bool
	// Observe, if set, is called after every group commit.
	Observe func(writes int, commit time.Duration)
	// ObserveRetry, if set, is called each time a transaction is run again
	// after losing a race with another, with the reason: "deadlock",
	// "certification" (Galera), "serialization", "lock_timeout" or
	// "duplicate_key" (mysql.Retry…). It must be safe for concurrent use.
	// The MySQL and PostgreSQL stores report; SQLite (one writer) never
	// retries.
	ObserveRetry func(reason string)
	// ObserveFanoutPending, if set, is told the number of rows of the
	// deferred fan-out table (fanout_pending: close batches of a burst whose
	// webhook deliveries are not created yet) at each look of the store's
	// fan-out loop, about every second.
	ObserveFanoutPending func(n int)
	// ObserveNoticeRejected, if set, is called for each notice on the
	// PostgreSQL store's NOTIFY channels that hourglass did not send, with
	// the channel (postgres.Config.ObserveNoticeRejected).
	ObserveNoticeRejected func(channel string)
	// AnnounceWithin, when positive, limits the created orders a shared
	// store announces to the other processes (ClusterStore.WatchCreated)
	// to those due within it: an order due later is beyond every node's
	// window, and its owner's loader brings it in time. Set it to the
	// engine's window (and the same window on every node). Zero: announce
	// every created order.
	AnnounceWithin time.Duration
	// IdleTxTimeout, when positive, has a PostgreSQL or MySQL server end a
	// session idle inside a transaction for this long, so a paused process
	// does not hold row locks over the others (cluster nodes set their
	// lease TTL: by when their partitions move). See mysql.Config and
	// postgres.Config.
	IdleTxTimeout time.Duration
	// CommitGather, when positive, is how long a PostgreSQL or MySQL
	// group-commit writer may wait for more API writes while clients write
	// concurrently and other live nodes share the database
	// (postgres.Config.CommitGather; --commit-gather). Zero: no wait.
	// SQLite ignores it.
	CommitGather time.Duration
	// Schema is PostgreSQL's schema for hourglass's tables
	// (postgres.Config.Schema; --database-schema). Empty or "public" (the
	// default): the URL's, the role's or the server's search_path. Other
	// stores refuse any other value: MySQL uses the URL's database.
	Schema string
}

// Kind returns which store a URL names, or an error saying what URLs are
// accepted. It does not connect.
func Kind(rawURL string) (string, error) {
	if rawURL == "" {
		return KindSQLite, nil
	}
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok && redact.IsDSN(rawURL) {
		return "", fmt.Errorf("database URL %s is a go-sql-driver DSN: write it as a URL, mysql://user:password@host:3306/database (?tls=… for TLS)", Redact(rawURL))
	}
	if !ok {
		return "", fmt.Errorf("database URL %s: want sqlite:///path/file.db, postgres://… or mysql://…", Redact(rawURL))
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		return KindSQLite, nil
	case "postgres", "postgresql":
		return KindPostgres, nil
	case "mysql":
		return KindMySQL, nil
	}
	return "", fmt.Errorf("database URL %s: unknown scheme %q (want sqlite, postgres, postgresql or mysql)", Redact(rawURL), scheme)
}

// Redact returns rawURL with its secrets replaced by "xxxxx", for messages
// and logs, as internal/redact does for every URL hourglass shows: the
// password of user:password@ and the value of every parameter named like
// a secret (password, sslpassword, token, …). A URL that does not parse
// (a go-sql-driver DSN) keeps its user and hides what follows it up to the
// '@'.
func Redact(rawURL string) string { return redact.URL(rawURL) }

// sqliteLocation returns the directory and file name of a SQLite store.
func sqliteLocation(o Options) (dir, file string, err error) {
	if o.URL == "" {
		return o.DataDir, "", nil
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return "", "", fmt.Errorf("database URL %s: %v", Redact(o.URL), redact.Err(err, o.URL))
	}
	if u.Host != "" || !filepath.IsAbs(u.Path) || strings.HasSuffix(u.Path, "/") || u.RawQuery != "" {
		return "", "", fmt.Errorf("database URL %s: want sqlite:///absolute/path/file.db (three slashes, an absolute file path, no query)", Redact(o.URL))
	}
	return filepath.Dir(u.Path), filepath.Base(u.Path), nil
}

// Open opens the database o.URL names, applying its pending migrations, and
// returns it. Errors are one line that says what to fix, without the
// password.
func Open(ctx context.Context, o Options) (hourglass.Database, error) {
	kind, err := Kind(o.URL)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(kind, o.Schema); err != nil {
		return nil, err
	}
	switch kind {
	case KindSQLite:
		dir, file, err := sqliteLocation(o)
		if err != nil {
			return nil, err
		}
		clock := o.Clock
		if clock == nil {
			clock = hourglass.SystemClock{}
		}
		return sqlite.Open(sqlite.Config{Dir: dir, FileName: file, Clock: clock, Logger: o.Logger, Outbox: o.Outbox, Observe: o.Observe, ObserveFanoutPending: o.ObserveFanoutPending})
	case KindPostgres:
		return postgres.Open(ctx, postgresConfig(o))
	default:
		return mysql.Open(ctx, mysqlConfig(o))
	}
}

// checkSchema refuses a schema on a store that has none.
func checkSchema(kind, schema string) error {
	if schema == "" || schema == "public" || kind == KindPostgres {
		return nil
	}
	if kind == KindMySQL {
		return fmt.Errorf("--database-schema %q is PostgreSQL's: on MySQL and MariaDB hourglass's tables are in the URL's database (mysql://user@host/hourglass), which a shop's transaction reaches by qualified name", schema)
	}
	return fmt.Errorf("--database-schema %q is PostgreSQL's: a SQLite database has no schemas", schema)
}

func postgresConfig(o Options) postgres.Config {
	return postgres.Config{Schema: o.Schema, URL: o.URL, MaxConns: o.MaxConns, Clock: o.Clock, Logger: o.Logger, Outbox: o.Outbox, Observe: o.Observe, AnnounceWithin: o.AnnounceWithin, IdleTxTimeout: o.IdleTxTimeout, ObserveRetry: o.ObserveRetry, ObserveFanoutPending: o.ObserveFanoutPending, CommitGather: o.CommitGather,
		ObserveNoticeRejected: o.ObserveNoticeRejected}
}

func mysqlConfig(o Options) mysql.Config {
	return mysql.Config{URL: o.URL, MaxConns: o.MaxConns, Clock: o.Clock, Logger: o.Logger, Outbox: o.Outbox, Observe: o.Observe, ObserveRetry: o.ObserveRetry, AnnounceWithin: o.AnnounceWithin, IdleTxTimeout: o.IdleTxTimeout, ObserveFanoutPending: o.ObserveFanoutPending, CommitGather: o.CommitGather}
}

// Migrate applies the pending migrations of the database o.URL names and
// returns how many it applied.
func Migrate(ctx context.Context, o Options) (int, error) {
	kind, err := Kind(o.URL)
	if err != nil {
		return 0, err
	}
	if err := checkSchema(kind, o.Schema); err != nil {
		return 0, err
	}
	switch kind {
	case KindSQLite:
		before, err := MigrationStatus(ctx, o)
		if err != nil {
			return 0, err
		}
		db, err := Open(ctx, o)
		if err != nil {
			return 0, err
		}
		return migrate.Pending(before), db.Close()
	case KindPostgres:
		return postgres.Migrate(ctx, postgresConfig(o))
	default:
		return mysql.Migrate(ctx, mysqlConfig(o))
	}
}

// MigrationStatus returns every migration of the database o.URL names with
// whether it is applied. It changes nothing.
func MigrationStatus(ctx context.Context, o Options) ([]migrate.Status, error) {
	kind, err := Kind(o.URL)
	if err != nil {
		return nil, err
	}
	switch kind {
	case KindSQLite:
		dir, file, err := sqliteLocation(o)
		if err != nil {
			return nil, err
		}
		return sqlite.MigrationStatus(ctx, dir, file)
	case KindPostgres:
		return postgres.MigrationStatus(ctx, postgresConfig(o))
	default:
		return mysql.MigrationStatus(ctx, mysqlConfig(o))
	}
}

// OpenScratch opens a new, empty database on the server o.URL names, for a
// benchmark: SQLite in a new temporary directory when o.URL is empty; on
// PostgreSQL and MySQL a new database beside the URL's (the user needs the
// right to create databases), so the URL's own data is never touched. drop
// closes it and deletes everything it created.
func OpenScratch(ctx context.Context, o Options) (db hourglass.Database, drop func() error, err error) {
	kind, err := Kind(o.URL)
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case KindSQLite:
		if o.URL != "" {
			return nil, nil, fmt.Errorf("database URL %s: a scratch SQLite database is made in a temporary directory; pass no sqlite URL", Redact(o.URL))
		}
		dir, err := os.MkdirTemp("", "hourglass-scratch-*")
		if err != nil {
			return nil, nil, err
		}
		o.DataDir = dir
		db, err := Open(ctx, o)
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		return db, func() error { return errors.Join(db.Close(), os.RemoveAll(dir)) }, nil
	}
	create := postgres.CreateScratch
	if kind == KindMySQL {
		create = mysql.CreateScratch
	}
	url, dropDB, err := create(ctx, o.URL)
	if err != nil {
		return nil, nil, err
	}
	o.URL = url
	db, err = Open(ctx, o)
	if err != nil {
		return nil, nil, errors.Join(err, dropDB(context.Background()))
	}
	return db, func() error { return errors.Join(db.Close(), dropDB(context.Background())) }, nil
}
