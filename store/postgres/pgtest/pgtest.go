// Package pgtest gives tests a fresh PostgreSQL database of their own on the
// server named by HOURGLASS_TEST_POSTGRES_URL: empty (NewDatabase), or a
// clone of a template database (NewDatabaseFrom), which costs one CREATE
// DATABASE instead of a migration per test.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // Open's database/sql driver
)

// Env names the variable holding the test server's URL; DefaultURL is used
// when it is unset.
const (
	Env        = "HOURGLASS_TEST_POSTGRES_URL"
	DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// AdminURL returns the test server's URL (a database the tests may connect
// to in order to create others). Like testenv.ServiceURL, it skips the
// test when the server is unreachable, or fails it when CI=true.
func AdminURL(t testing.TB) string {
	t.Helper()
	return testenv.ServiceURL(t, "PostgreSQL", Env, DefaultURL)
}

// NewDatabase creates a new, empty database named for the test (hg_<test>_
// <random>) and returns its URL; the database is dropped in t.Cleanup, its
// leftover connections terminated first. It skips the test when the server
// is unreachable (fails under CI=true).
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, Template{})
}

// Template is a database state that tests start from, such as a store's
// migrated schema: Prepare brings a new, empty database (at the URL it is
// given) to that state and closes every connection it opened; Key names
// the state among a process's templates.
//
// Each test process builds a template database once per Key
// (hg_tmpl_<random>, with Prepare), marks it a template that accepts no
// connections (PostgreSQL copies no database someone is connected to) and
// clones it for each test. A process cannot drop its templates when its
// last test ends: it holds an advisory lock on each for as long as it
// lives, and the next process to build one drops every template whose lock
// is free.
type Template struct {
	Key     string
	Prepare func(ctx context.Context, url string) error
}

// NewDatabaseFrom is NewDatabase for a database that starts as a copy of
// tmpl (CREATE DATABASE … TEMPLATE), which this process builds first if it
// has not yet. A failure to build it fails the test.
func NewDatabaseFrom(t testing.TB, tmpl Template) string {
	t.Helper()
	if tmpl.Key == "" || tmpl.Prepare == nil {
		t.Fatal("pgtest: a Template needs a Key and a Prepare")
	}
	return newDatabase(t, tmpl)
}

// newDatabase creates the test's database, a copy of tmpl when it has a
// Key, and drops it in t.Cleanup.
func newDatabase(t testing.TB, tmpl Template) string {
	t.Helper()
	admin := AdminURL(t)
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if tmpl.Key != "" {
		from, err := processTemplates.Get(admin+"\x00"+tmpl.Key, func() (template, error) { return buildTemplate(ctx, admin, tmpl) })
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		create += " TEMPLATE " + pgx.Identifier{from.name}.Sanitize()
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: connect to the test server: %v", err)
	}
	defer conn.Close(context.Background())
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, create)
		// 55006: the template (template1 for an empty database) is in use
		// by a concurrent CREATE DATABASE or a connection.
		if err == nil || attempt == 10 || sqlState(err) != "55006" {
			break
		}
		select { // the next try in 100 ms, within the time of ctx
		case <-retry.C:
		case <-ctx.Done():
		}
	}
	if err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { Drop(t, admin, name) })
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// templatePrefix begins the name of every template database.
const templatePrefix = "hg_tmpl_"

// processTemplates holds, by server and Template.Key, the template
// databases this test process built, with the session that keeps each
// one's advisory lock: package state, since a template is built once for
// every test of the process.
var processTemplates testenv.OnceEach[template]

type template struct {
	name string
	hold *pgx.Conn
}

// lockKey is the advisory lock key of the template database name.
func lockKey(name string) int64 {
	sum := sha256.Sum256([]byte("pgtest template " + name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// buildTemplate drops the templates of processes that are gone, then
// creates a template database, holding its advisory lock on a session kept
// open for the rest of the process, runs Prepare on it and marks it a
// template.
func buildTemplate(ctx context.Context, admin string, tmpl Template) (template, error) {
	var r [6]byte
	rand.Read(r[:])
	name := templatePrefix + hex.EncodeToString(r[:])
	quoted := pgx.Identifier{name}.Sanitize()
	hold, err := pgx.Connect(ctx, admin)
	if err != nil {
		return template{}, fmt.Errorf("build template %s: %w", name, err)
	}
	fail := func(err error) (template, error) {
		hold.Close(context.Background())
		return template{}, fmt.Errorf("build template %s: %w", name, err)
	}
	if _, err := hold.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey(name)); err != nil {
		return fail(err)
	}
	if err := dropStale(ctx, hold); err != nil {
		return fail(err)
	}
	if _, err := hold.Exec(ctx, "CREATE DATABASE "+quoted); err != nil {
		return fail(err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		return fail(err)
	}
	u.Path = "/" + name
	if err := tmpl.Prepare(ctx, u.String()); err != nil {
		hold.Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)")
		return fail(err)
	}
	// Prepare closed its connections, but their backends may still be
	// exiting, and a clone fails while any is: end them.
	for _, stmt := range []string{
		"ALTER DATABASE " + quoted + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '` + name + `'`,
	} {
		if _, err := hold.Exec(ctx, stmt); err != nil {
			return fail(err)
		}
	}
	return template{name, hold}, nil
}

// dropStale drops the template databases whose advisory lock no session
// holds: the process that built them has ended.
func dropStale(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'hg\_tmpl\_%'`)
	if err != nil {
		return fmt.Errorf("look up stale templates: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("look up stale templates: %w", err)
	}
	for _, old := range names {
		var free bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockKey(old)).Scan(&free); err != nil {
			return fmt.Errorf("stale template %s: %w", old, err)
		}
		if !free {
			continue
		}
		quoted := pgx.Identifier{old}.Sanitize()
		for _, stmt := range []string{
			"ALTER DATABASE " + quoted + " WITH IS_TEMPLATE false",
			"DROP DATABASE IF EXISTS " + quoted + " WITH (FORCE)",
			fmt.Sprintf("SELECT pg_advisory_unlock(%d)", lockKey(old)),
		} {
			if _, err := conn.Exec(ctx, stmt); err != nil && sqlState(err) != "3D000" {
				return fmt.Errorf("drop the stale template %s: %w", old, err)
			}
		}
	}
	return nil
}

// sqlState is err's SQLSTATE, or "" when it has none.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Drop drops the database name on the server at admin, terminating its
// connections.
func Drop(t testing.TB, admin, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
	}
}

// databaseName is hg_, the test's name folded to [a-z0-9_], and 8 random hex
// digits, within PostgreSQL's 63-byte identifiers.
func databaseName(test string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(test) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	slug := b.String()
	if len(slug) > 40 {
		slug = slug[len(slug)-40:]
	}
	var r [4]byte
	rand.Read(r[:])
	return "hg_" + slug + "_" + hex.EncodeToString(r[:])
}

// Open opens a database/sql pool on url with pgx's driver, as a shop's own
// code connects (the tests' shop tables, its transactions); it is closed
// in t.Cleanup.
func Open(t testing.TB, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
