// Package pgtest gives tests a fresh PostgreSQL database of their own on the
// server named by HOURGLASS_TEST_POSTGRES_URL.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/jackc/pgx/v5"
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
	admin := AdminURL(t)
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: connect to the test server: %v", err)
	}
	defer conn.Close(context.Background())
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		// 55006: the template is in use by a concurrent CREATE DATABASE.
		if err == nil || attempt == 10 || !strings.Contains(err.Error(), "55006") {
			break
		}
		select { // the next try in 100 ms, within the 30 s of ctx
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
