// Package mytest gives tests a fresh MySQL or MariaDB database each: empty
// (NewDatabase), or a copy of a template database (NewDatabaseFrom), which
// costs a CREATE TABLE per table instead of every migration's statements
// (17 migrations, 44 statements, a third of the time).
package mytest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
)

// EnvURL names the variable holding the test server's URL.
const EnvURL = "HOURGLASS_TEST_MYSQL_URL"

// DefaultURL is the test server when EnvURL is unset.
const DefaultURL = "mysql://root@127.0.0.1:3306/test"

// NewDatabase creates a database named hg_<random> on the server at
// $HOURGLASS_TEST_MYSQL_URL (default DefaultURL), returns its mysql:// URL,
// and drops it in t.Cleanup. When the server is unreachable the test is
// skipped, or fails under CI=true (testenv.ServiceURL). The URL's
// user needs CREATE and DROP on hg_* databases.
func NewDatabase(t testing.TB) string {
	t.Helper()
	raw := testenv.ServiceURL(t, "MySQL", EnvURL, DefaultURL)
	return newDatabase(t, raw, Template{})
}

// Template is a database state that tests start from, such as a store's
// migrated schema: Prepare brings a new, empty database (at the URL it is
// given) to that state; Key names the state among a process's templates.
//
// Each test process builds a template database once per Key and server
// (hg_tmpl_<random>, with Prepare) and copies it for each test; MySQL
// cannot copy a database, so NewDatabaseFrom copies its parts. The template
// may hold tables (their rows, AUTO_INCREMENT counters, keys and checks
// come along) and triggers, and nothing else (no views, routines or
// events). A process cannot drop its templates when its last test ends: it
// holds a named lock (GET_LOCK) on each for as long as it lives, and the
// next process to build one drops every template whose lock is free.
type Template struct {
	Key     string
	Prepare func(ctx context.Context, url string) error
}

// NewDatabaseFrom is NewDatabase for a database that starts as a copy of
// tmpl, which this process builds first if it has not yet. A failure to
// build or copy it fails the test.
func NewDatabaseFrom(t testing.TB, tmpl Template) string {
	t.Helper()
	raw := testenv.ServiceURL(t, "MySQL", EnvURL, DefaultURL)
	return NewDatabaseFromOn(t, raw, tmpl)
}

// NewDatabaseFromOn is NewDatabaseFrom on the server at raw (a Galera
// node, say) instead of the test server.
func NewDatabaseFromOn(t testing.TB, raw string, tmpl Template) string {
	t.Helper()
	if tmpl.Key == "" || tmpl.Prepare == nil {
		t.Fatal("mytest: a Template needs a Key and a Prepare")
	}
	return newDatabase(t, raw, tmpl)
}

// newDatabase creates the test's database on the server at raw, a copy of
// tmpl when it has a Key, and drops it in t.Cleanup.
func newDatabase(t testing.TB, raw string, tmpl Template) string {
	t.Helper()
	db := Admin(t, raw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var from template
	if tmpl.Key != "" {
		var err error
		from, err = processTemplates.Get(raw+"\x00"+tmpl.Key, func() (template, error) { return buildTemplate(ctx, raw, tmpl) })
		if err != nil {
			t.Fatalf("mytest: %v", err)
		}
	}
	name := randomName("hg_")
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("mytest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("mytest: drop database %s: %v", name, err)
		}
	})
	if from.name != "" {
		if err := copyDatabase(ctx, db, from.name, name); err != nil {
			t.Fatalf("mytest: %v", err)
		}
	}
	u, err := myurl.WithDatabase(raw, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// randomName is prefix and 12 random hex digits.
func randomName(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// templatePrefix begins the name of every template database.
const templatePrefix = "hg_tmpl_"

// processTemplates are the template databases of this test process (one
// per server and Template.Key, each with the session holding its named
// lock), kept in package state as each serves all the process's tests.
var processTemplates testenv.OnceEach[template]

type template struct {
	name string
	hold *sql.Conn
}

// buildTemplate drops the templates of processes that are gone, then
// creates a template database, holding its named lock on a connection kept
// open for the rest of the process, and runs Prepare on it.
func buildTemplate(ctx context.Context, raw string, tmpl Template) (template, error) {
	name := randomName(templatePrefix)
	cfg, err := myurl.Parse(raw)
	if err != nil {
		return template{}, err
	}
	cfg.InterpolateParams = true
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return template{}, err
	}
	db := sql.OpenDB(connector)
	fail := func(err error) (template, error) {
		db.Close()
		return template{}, fmt.Errorf("build template %s: %w", name, err)
	}
	// One session, never returned to the pool: it is closed, and the lock
	// released, when the process ends.
	hold, err := db.Conn(ctx)
	if err != nil {
		return fail(err)
	}
	var got sql.NullInt64
	if err := hold.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, name).Scan(&got); err != nil || got.Int64 != 1 {
		return fail(fmt.Errorf("lock: %v (GET_LOCK = %v)", err, got))
	}
	stale, err := staleTemplates(ctx, hold)
	if err != nil {
		return fail(err)
	}
	for _, old := range stale {
		if _, err := hold.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+old+"`"); err != nil {
			return fail(fmt.Errorf("drop the stale template %s: %w", old, err))
		}
	}
	if _, err := hold.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fail(err)
	}
	u, err := myurl.WithDatabase(raw, name)
	if err != nil {
		return fail(err)
	}
	if err := tmpl.Prepare(ctx, u); err != nil {
		hold.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`")
		return fail(err)
	}
	return template{name, hold}, nil
}

// staleTemplates are the template databases on the server whose named
// lock no session holds: the process that built them has ended.
func staleTemplates(ctx context.Context, db *sql.Conn) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT SCHEMA_NAME FROM information_schema.SCHEMATA
WHERE SCHEMA_NAME LIKE 'hg\_tmpl\_%' AND IS_FREE_LOCK(SCHEMA_NAME) = 1`)
	if err != nil {
		return nil, fmt.Errorf("look up stale templates: %w", err)
	}
	return collect(rows)
}

// copyDatabase makes the empty database to a copy of from: each table as
// SHOW CREATE TABLE gives it (keys, checks, its AUTO_INCREMENT counter),
// then its rows, then the triggers. It refuses a template holding anything
// else.
func copyDatabase(ctx context.Context, db *sql.DB, from, to string) error {
	var others int
	if err := db.QueryRowContext(ctx, `SELECT
	(SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE <> 'BASE TABLE') +
	(SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ?) +
	(SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ?)`, from, from, from).Scan(&others); err != nil {
		return fmt.Errorf("copy template %s: %w", from, err)
	}
	if others > 0 {
		return fmt.Errorf("copy template %s: it holds views, routines or events, which mytest does not copy", from)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("copy template %s: %w", from, err)
	}
	defer conn.Close()
	// The connection is the pool's again afterwards: leave it as it was.
	defer conn.ExecContext(context.Background(), "SET SESSION foreign_key_checks = DEFAULT, sql_mode = DEFAULT")
	// On Galera a statement beside another database's DDL (total order
	// isolation) can be aborted with 1213: each is run again.
	exec := func(query string, args ...any) error {
		return again(ctx, func() error { _, err := conn.ExecContext(ctx, query, args...); return err })
	}
	row := func(query string, dest ...any) error {
		return again(ctx, func() error { return conn.QueryRowContext(ctx, query).Scan(dest...) })
	}
	list := func(query string, args ...any) (out []string, err error) {
		err = again(ctx, func() error { out, err = column(ctx, conn, query, args...); return err })
		return out, err
	}
	for _, stmt := range []string{"USE `" + to + "`", "SET SESSION foreign_key_checks = 0"} {
		if err := exec(stmt); err != nil {
			return fmt.Errorf("copy template %s: %w", from, err)
		}
	}
	tables, err := list(`SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME`, from)
	if err != nil {
		return fmt.Errorf("copy template %s: %w", from, err)
	}
	for _, table := range tables {
		var name, create string
		if err := row("SHOW CREATE TABLE `"+from+"`.`"+table+"`", &name, &create); err != nil {
			return fmt.Errorf("copy template %s: %w", from, err)
		}
		if err := exec(create); err != nil {
			return fmt.Errorf("copy template %s: table %s: %w", from, table, err)
		}
		if err := exec("INSERT INTO `" + table + "` SELECT * FROM `" + from + "`.`" + table + "`"); err != nil {
			return fmt.Errorf("copy template %s: rows of %s: %w", from, table, err)
		}
	}
	triggers, err := list(`SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?
ORDER BY EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER`, from)
	if err != nil {
		return fmt.Errorf("copy template %s: %w", from, err)
	}
	for _, trigger := range triggers {
		// Trigger, sql_mode, SQL Original Statement, and character sets.
		var name, mode, create string
		var rest [4]any
		if err := row("SHOW CREATE TRIGGER `"+from+"`.`"+trigger+"`", &name, &mode, &create, &rest[0], &rest[1], &rest[2], &rest[3]); err != nil {
			return fmt.Errorf("copy template %s: trigger %s: %w", from, trigger, err)
		}
		if err := exec("SET SESSION sql_mode = ?", mode); err != nil {
			return fmt.Errorf("copy template %s: trigger %s: %w", from, trigger, err)
		}
		if err := exec(create); err != nil {
			return fmt.Errorf("copy template %s: trigger %s: %w", from, trigger, err)
		}
	}
	return nil
}

// again runs f until it returns anything but MySQL's 1213 (a deadlock,
// which Galera also reports when it aborts a statement beside another
// one's DDL), five times at most, waiting a little longer each time.
func again(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		var me *gomysql.MySQLError
		if err == nil || attempt == 5 || !errors.As(err, &me) || me.Number != 1213 {
			return err
		}
		select {
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

// column runs query, which selects one string column, and returns its
// values.
func column(ctx context.Context, conn *sql.Conn, query string, args ...any) ([]string, error) {
	rows, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows)
}

// collect reads rows of one string column and closes them.
func collect(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

// Admin opens a small pool on the server and database of url (for test
// setup: creating users, killing connections); it is closed in t.Cleanup.
func Admin(t testing.TB, url string) *sql.DB {
	t.Helper()
	cfg, err := myurl.Parse(url)
	if err != nil {
		t.Fatalf("mytest: %v", err)
	}
	cfg.InterpolateParams = true
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mytest: %v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}
