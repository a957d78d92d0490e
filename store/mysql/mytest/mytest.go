// Package mytest gives tests a fresh MySQL or MariaDB database each.
package mytest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
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
	db := Admin(t, raw)
	var b [6]byte
	rand.Read(b[:])
	name := "hg_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
	u, err := myurl.WithDatabase(raw, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
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
