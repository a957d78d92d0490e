// Package migrate applies a store's schema migrations: numbered .sql files
// embedded in the store's package, applied in order, once, under a lock that
// every process starting on the same database takes, so processes starting
// at once apply each migration once. Each store supplies a Target (how to
// lock, which versions are applied, how to apply one in its dialect); this
// package holds the order, the checks and the status.
//
// Why our own runner and not a migration library: the embedded SQLite store
// is not a database/sql driver, PostgreSQL goes through pgx's native pool,
// and the rules we need are few (lock, refuse a schema newer than the
// binary, report status); a library would add a second way to reach each
// database for 150 lines of logic.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Migration is one schema change: version N is the file NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Target is one database's side of migrations. Implementations need not be
// safe for concurrent use: Up and Status call them from one goroutine.
type Target interface {
	// Lock takes a lock every process migrating the same database takes
	// (PostgreSQL: an advisory lock; MySQL: GET_LOCK; SQLite: the write
	// lock), waiting for it, and returns how to release it.
	Lock(ctx context.Context) (unlock func() error, err error)
	// Applied returns the versions applied so far, ascending (none on a new
	// database, whose version table it creates if need be).
	Applied(ctx context.Context) ([]int, error)
	// Apply runs m and records its version as applied: atomically where the
	// database's DDL is transactional (PostgreSQL, SQLite); on MySQL, whose
	// DDL commits by itself, migrations are written to be re-runnable.
	Apply(ctx context.Context, m Migration) error
}

// ErrSchemaNewer is returned (wrapped, with the versions) when the database
// has a migration applied that this binary does not know: it was migrated
// by a newer hourglass, and this one must not write to it.
var ErrSchemaNewer = errors.New("database schema is newer than this binary")

// LockTimeoutDefault bounds how long a migration's statement waits for a
// table lock (PostgreSQL's lock_timeout, MySQL's lock_wait_timeout) before
// the migration gives up with ErrLockTimeout. Without it an ALTER TABLE
// queued behind a long transaction blocks every later statement on that
// table, the event writes of every node included, for as long as that
// transaction lasts.
const LockTimeoutDefault = 5 * time.Second

// ErrLockTimeout is returned (wrapped, naming the migration and the time
// waited) by a Target's Apply when a statement gave up waiting for a table
// lock: another session's long transaction holds it. Nothing of the
// migration was applied on PostgreSQL and SQLite; on MySQL the statements
// before it were, and the migration is re-runnable.
var ErrLockTimeout = errors.New("a long transaction holds a lock on a table this migration changes; end that transaction (or wait for it) and start again")

// Load reads the migrations in dir of fsys: files named NNNN_name.sql, whose
// numbers must run 1, 2, 3… without a gap. It fails on any other file name,
// a gap or a repeat.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		base, ok := strings.CutSuffix(e.Name(), ".sql")
		num, name, ok2 := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || !ok2 || err != nil || v < 1 || name == "" {
			return nil, fmt.Errorf("migrate: %s: want files named NNNN_name.sql, got %q", dir, e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrate: %s: migration %d (%s) where %d was expected: versions must run 1, 2, 3… without gaps", dir, m.Version, m.Name, i+1)
		}
	}
	return out, nil
}

// Up applies every migration of ms not yet applied, in order, under the
// target's lock, and returns how many it applied. It applies nothing and
// fails with ErrSchemaNewer when the database has a version ms does not
// have.
func Up(ctx context.Context, t Target, ms []Migration) (n int, err error) {
	unlock, err := t.Lock(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	defer func() {
		if uerr := unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("migrate: release the migration lock: %w", uerr)
		}
	}()
	applied, err := t.Applied(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	if err := checkKnown(applied, ms); err != nil {
		return 0, err
	}
	for _, m := range ms {
		if slices.Contains(applied, m.Version) {
			continue
		}
		if err := t.Apply(ctx, m); err != nil {
			return n, fmt.Errorf("migrate: apply %04d_%s: %w", m.Version, m.Name, err)
		}
		n++
	}
	return n, nil
}

func checkKnown(applied []int, ms []Migration) error {
	if len(applied) > 0 && applied[len(applied)-1] > len(ms) {
		return fmt.Errorf("migrate: %w: the database is at version %d, this binary knows up to %d; upgrade hourglass", ErrSchemaNewer, applied[len(applied)-1], len(ms))
	}
	return nil
}

// Status is one migration's state in a database.
type Status struct {
	Migration
	Applied bool
}

// StatusOf returns every migration of ms with whether it is applied, in
// order. It takes no lock and changes nothing. It fails with ErrSchemaNewer
// as Up does.
func StatusOf(ctx context.Context, t Target, ms []Migration) ([]Status, error) {
	applied, err := t.Applied(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	if err := checkKnown(applied, ms); err != nil {
		return nil, err
	}
	out := make([]Status, len(ms))
	for i, m := range ms {
		out[i] = Status{Migration: m, Applied: slices.Contains(applied, m.Version)}
	}
	return out, nil
}

// Pending returns how many of statuses are not applied.
func Pending(statuses []Status) int {
	n := 0
	for _, s := range statuses {
		if !s.Applied {
			n++
		}
	}
	return n
}

// createTable matches the table a CREATE TABLE statement names, quoted or
// not.
var createTable = regexp.MustCompile("(?i)\\bCREATE\\s+TABLE\\s+(?:IF\\s+NOT\\s+EXISTS\\s+)?[`\"]?(\\w+)[`\"]?")

// Tables returns the names of the tables ms create, sorted and distinct:
// the schema as the migrations define it, so a check over it (a start-up
// privilege check) covers a table a new migration adds without a hand
// list to update.
func Tables(ms []Migration) []string {
	var out []string
	for _, m := range ms {
		for _, sub := range createTable.FindAllStringSubmatch(m.SQL, -1) {
			out = append(out, strings.ToLower(sub[1]))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
