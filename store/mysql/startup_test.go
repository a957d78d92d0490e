package mysql_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// withUser returns raw with its user and password replaced.
func withUser(t *testing.T, raw, user, password string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// withPath returns raw with its path (database) replaced.
func withPath(t *testing.T, raw, path string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = path
	return u.String()
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// newUser creates a user with password and the grants given (statements
// with %s for the user), dropped in t.Cleanup.
func newUser(t *testing.T, adminURL, password string, grants ...string) string {
	t.Helper()
	db := mytest.Admin(t, adminURL)
	var b [4]byte
	rand.Read(b[:])
	user := "hg_x_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, password)); err != nil {
		t.Fatalf("create user: %v", err)
	}
	t.Cleanup(func() { db.ExecContext(context.Background(), fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user)) })
	for _, g := range grants {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(g, user)); err != nil {
			t.Fatalf("%s: %v", fmt.Sprintf(g, user), err)
		}
	}
	return user
}

// newSocketUser creates a user that authenticates with the unix_socket
// plugin (MariaDB; auth_socket on MySQL), dropped in t.Cleanup.
func newSocketUser(t *testing.T, adminURL string) string {
	t.Helper()
	db := mytest.Admin(t, adminURL)
	var b [4]byte
	rand.Read(b[:])
	user := "hg_sock_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED VIA unix_socket", user)); err != nil {
		if _, err2 := db.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED WITH auth_socket", user)); err2 != nil {
			t.Skipf("no socket authentication plugin: %v; %v", err, err2)
		}
	}
	t.Cleanup(func() { db.ExecContext(context.Background(), fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user)) })
	return user
}

// TestStartupErrors: each start-up failure is one line that says what to
// fix, and never shows the password.
func TestStartupErrors(t *testing.T) {
	t.Parallel()
	good := mytest.NewDatabase(t)
	gu, _ := url.Parse(good)
	dbName := strings.TrimPrefix(gu.Path, "/")
	const secret = "s3cr3t-Pa55"
	wrongPwUser := newUser(t, good, "right-password-1")
	noDBUser := newUser(t, good, secret)
	selectOnly := newUser(t, good, secret, "GRANT SELECT ON `"+dbName+"`.* TO '%s'@'%%'")
	socketUser := newSocketUser(t, good)

	for _, tt := range []struct {
		name string
		url  string
		want []string
	}{
		{"malformed URL", "mysql://root:" + secret + "@127.0.0.1:3306/db%zz", []string{"malformed", "mysql://user:password@host:3306/database"}},
		{"no database", withPath(t, good, "/"), []string{"database name"}},
		{"not mysql", strings.Replace(good, "mysql://", "postgres://", 1), []string{"scheme must be mysql://"}},
		{"bad tls", good + "?tls=maybe", []string{"tls", "skip-verify"}},
		{"unreachable", "mysql://root:" + secret + "@" + freePort(t) + "/test", []string{"cannot reach the server at 127.0.0.1:", "host and port"}},
		{"unknown database", withPath(t, good, "/hg_no_such_db"), []string{`database "hg_no_such_db" does not exist`, "CREATE DATABASE"}},
		{"wrong password", withUser(t, good, wrongPwUser, secret), []string{"refused the login of user \"" + wrongPwUser + "\"", "1045", "password"}},
		{"no access to the database", withUser(t, good, noDBUser, secret), []string{"1044", "GRANT ALL ON `" + dbName + "`.* TO '" + noDBUser + "'"}},
		{"no CREATE privilege", withUser(t, good, selectOnly, secret), []string{"1142", "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX ON `" + dbName + "`.*"}},
		// root on a packaged MariaDB: its account logs in only through the
		// server's socket as the OS user of the same name.
		{"socket authentication", withUser(t, good, socketUser, secret), []string{"1698", socketUser, "unix_socket", "CREATE USER", "IDENTIFIED BY"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := mysql.Open(ctx, mysql.Config{URL: tt.url})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			t.Log(msg)
			if strings.Contains(msg, "\n") {
				t.Errorf("error is more than one line: %q", msg)
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error shows the password: %q", msg)
			}
			if !strings.HasPrefix(msg, "mysql: ") {
				t.Errorf("error %q does not name the package", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

// TestMigrationsAppliedOnceWhenOpensRace: four processes starting at once
// on a new database apply each migration exactly once, under GET_LOCK.
func TestMigrationsAppliedOnceWhenOpensRace(t *testing.T) {
	t.Parallel()
	u := mytest.NewDatabase(t)
	ms, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for range 4 {
		wg.Go(func() {
			n, err := mysql.Migrate(context.Background(), mysql.Config{URL: u})
			if err != nil {
				t.Errorf("Migrate: %v", err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != len(ms) {
		t.Fatalf("applied %d migrations in all, want %d (each once)", total, len(ms))
	}
	var rows int
	if err := mytest.Admin(t, u).QueryRow(`SELECT COUNT(*) FROM hourglass_schema_migrations`).Scan(&rows); err != nil || rows != len(ms) {
		t.Fatalf("version table has %d rows (%v), want %d", rows, err, len(ms))
	}
	st, err := mysql.MigrationStatus(context.Background(), mysql.Config{URL: u})
	if err != nil || migrate.Pending(st) != 0 || len(st) != len(ms) {
		t.Fatalf("status %+v, %v: want all applied", st, err)
	}
	// Opening again applies nothing.
	if n, err := mysql.Migrate(context.Background(), mysql.Config{URL: u}); err != nil || n != 0 {
		t.Fatalf("Migrate again = %d, %v", n, err)
	}
}

// TestNewerSchemaIsRefused: a database migrated by a newer hourglass is not
// written to.
func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	u := mytest.NewDatabase(t)
	s := open(t, u, nil, false)
	s.Close()
	ms, _ := mysql.Migrations()
	if _, err := mytest.Admin(t, u).Exec(`INSERT INTO hourglass_schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future', 0)`, len(ms)+1); err != nil {
		t.Fatal(err)
	}
	_, err := mysql.Open(context.Background(), mysql.Config{URL: u})
	if !errors.Is(err, migrate.ErrSchemaNewer) {
		t.Fatalf("Open = %v, want ErrSchemaNewer", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is more than one line: %q", err)
	}
	if _, err := mysql.MigrationStatus(context.Background(), mysql.Config{URL: u}); !errors.Is(err, migrate.ErrSchemaNewer) {
		t.Fatalf("MigrationStatus = %v, want ErrSchemaNewer", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  mysql.Config
		want string
	}{
		{mysql.Config{}, "URL is required"},
		{mysql.Config{URL: "mysql://u@h/db", MaxConns: -1}, "MaxConns must be 0..1000"},
		{mysql.Config{URL: "mysql://u@h/db", MaxBatch: 1 << 20}, "MaxBatch must be 0..10000"},
		{mysql.Config{URL: "mysql://u:pw@h/db?parseTime=true"}, `parameter "parseTime" is not supported`},
		{mysql.Config{URL: "mysql://u:pw@h/db?tls=skip-verify&timeout=3s"}, ""},
	} {
		err := tt.cfg.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tt.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), ":pw@") {
			t.Errorf("Validate(%q) = %v, want %q without the password", tt.cfg.URL, err, tt.want)
		}
	}
}
