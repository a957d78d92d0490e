package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// exec runs sql on the database at rawURL.
func exec(t *testing.T, rawURL, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// withUser returns rawURL logging in as user with password.
func withUser(rawURL, user, password string) string {
	u, _ := url.Parse(rawURL)
	if password == "" {
		u.User = url.User(user)
	} else {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// newRole creates a role (cluster-wide) dropped in t.Cleanup, after the
// test's databases (cleanups run last-in first-out).
func newRole(t *testing.T, admin, options string) string {
	t.Helper()
	var r [4]byte
	rand.Read(r[:])
	name := "hg_role_" + hex.EncodeToString(r[:])
	exec(t, admin, "CREATE ROLE "+name+" "+options)
	t.Cleanup(func() { exec(t, admin, "DROP ROLE IF EXISTS "+name) })
	return name
}

// TestStartupErrors checks that each start-up failure is one line that says
// what to fix, and never shows the password.
func TestStartupErrors(t *testing.T) {
	t.Parallel()
	admin := pgtest.AdminURL(t)
	const secret = "s3cr3t-pw"
	nologin := newRole(t, admin, "NOLOGIN")
	plain := newRole(t, admin, "LOGIN")
	reader := newRole(t, admin, "LOGIN")
	db := pgtest.NewDatabase(t) // after the roles: dropped before them
	// A database migrated by its owner whose tables reader may not write.
	if _, err := postgres.Migrate(context.Background(), postgres.Config{URL: db, MaxConns: 4}); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "GRANT USAGE ON SCHEMA public TO "+reader)
	exec(t, db, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+reader)
	noCreate := pgtest.NewDatabase(t) // a new database plain may connect to but not create in
	for _, tt := range []struct {
		name string
		url  string
		want []string
	}{
		{"malformed URL", "postgres://u:" + secret + "@127.0.0.1:5432/db?sslmode=bogus", []string{"not a valid PostgreSQL URL"}},
		{"not a URL", "mysql://u:" + secret + "@host/db", []string{"scheme must be postgres:// or postgresql://"}},
		{"unreachable", "postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable", []string{"cannot reach the server at 127.0.0.1:1", "host and port"}},
		{"unknown database", withUser(strings.Replace(db, "/hg_", "/hg_missing_", 1), "postgres", secret), []string{"does not exist", "(3D000)", "CREATE DATABASE"}},
		{"unknown user", withUser(db, "hg_no_such_role", secret), []string{`user "hg_no_such_role"`, "28000", "does not exist"}},
		{"role without LOGIN", withUser(db, nologin, secret), []string{nologin, "not permitted to log in", "28000"}},
		{"no CREATE on the schema", withUser(noCreate, plain, secret), []string{"42501", "GRANT CREATE", plain}},
		{"no write on the tables", withUser(db, reader, secret), []string{reader, "may not write", "orders, products", "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA"}},
		// The README's sslmode=verify-full against a server whose
		// certificate does not name 127.0.0.1, or that offers no TLS: not
		// a host or port to fix.
		{"TLS not verified", strings.Replace(withUser(db, "postgres", secret), "sslmode=disable", "sslmode=verify-full", 1), []string{"TLS with the server", "sslmode=verify-full", "sslrootcert", "sslmode=require"}},
		{"TLS refused", "postgres://u:" + secret + "@" + noTLSServer(t) + "/db?sslmode=verify-full", []string{"TLS with the server", "sslmode=verify-full requires TLS", "does not offer it", "sslmode=disable"}},
		// A MySQL server's port answers no PostgreSQL handshake.
		{"not a PostgreSQL server", "postgres://u:" + secret + "@" + mysqlHost(t) + "/db?sslmode=disable", []string{"not a PostgreSQL server", "port"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := postgres.Open(context.Background(), postgres.Config{URL: tt.url, MaxConns: 4})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans several lines: %q", msg)
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error shows the password: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			t.Log(msg)
		})
	}
	t.Run("granted as told", func(t *testing.T) {
		exec(t, db, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "+reader)
		exec(t, db, "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "+reader)
		s := open(t, withUser(db, reader, secret), nil, false)
		mustProduct(t, s, "A", 1)
		mustCreate(t, s, time.Minute, "A")
	})
}

// noTLSServer returns the address of a server that answers a TLS request
// as a PostgreSQL server without ssl does: 'N'.
func noTLSServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var req [8]byte
			if _, err := io.ReadFull(c, req[:]); err == nil {
				c.Write([]byte{'N'})
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// mysqlHost returns the host:port of the test MySQL server, whose port
// speaks another protocol.
func mysqlHost(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.ServiceURL(t, "MySQL", mytest.EnvURL, mytest.DefaultURL))
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestConfigValidate checks Validate names the field.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  postgres.Config
		want string
	}{
		{postgres.Config{}, "Config.URL is required"},
		{postgres.Config{URL: "postgres://h/db", MaxConns: -1}, "Config.MaxConns"},
		{postgres.Config{URL: "postgres://h/db", MaxConns: 1}, "Config.MaxConns"},
		{postgres.Config{URL: "postgres://h/db", MaxBatch: -1}, "Config.MaxBatch"},
	} {
		if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
	if err := (postgres.Config{URL: "postgresql://u:p@h:5432/db?sslmode=disable"}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// TestMigrationsRace starts four migrations and four Opens at once on a new
// database: each migration is applied exactly once.
func TestMigrationsRace(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ms, err := postgres.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	cfg := postgres.Config{URL: db, MaxConns: 4}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
	)
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			n, err := postgres.Migrate(context.Background(), cfg)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			applied += n
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), cfg)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	if applied > len(ms) {
		t.Errorf("Migrate calls applied %d migrations in all, want at most %d", applied, len(ms))
	}
	st, err := postgres.MigrationStatus(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != len(ms) || migrate.Pending(st) != 0 {
		t.Fatalf("status %+v, want all %d applied", st, len(ms))
	}
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM hourglass_schema_migrations`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(ms) {
		t.Fatalf("%d version rows, want %d", rows, len(ms))
	}
	if n, err := postgres.Migrate(context.Background(), cfg); err != nil || n != 0 {
		t.Fatalf("Migrate on a migrated database = %d, %v; want 0", n, err)
	}
}

// TestSchemaNewer checks a database migrated by a newer binary is refused.
func TestSchemaNewer(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	cfg := postgres.Config{URL: db, MaxConns: 4}
	if _, err := postgres.Migrate(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	exec(t, db, `INSERT INTO hourglass_schema_migrations (version, name) VALUES (9999, 'from_the_future')`)
	if s, err := postgres.Open(context.Background(), cfg); !errors.Is(err, migrate.ErrSchemaNewer) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open = %v, want ErrSchemaNewer", err)
	}
	if _, err := postgres.MigrationStatus(context.Background(), cfg); !errors.Is(err, migrate.ErrSchemaNewer) {
		t.Fatalf("MigrationStatus = %v, want ErrSchemaNewer", err)
	}
}

// TestSearchPath checks the store lives in the first schema of the URL's
// search_path, not in public.
func TestSearchPath(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	exec(t, db, `CREATE SCHEMA "Hg App"`)
	s := open(t, db+"&search_path=%22Hg%20App%22", nil, false) // pgx does not read "+" as a space
	mustProduct(t, s, "A", 1)
	mustCreate(t, s, time.Minute, "A")
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var inApp, inPublic bool
	if err := conn.QueryRow(context.Background(), `SELECT to_regclass('"Hg App".orders') IS NOT NULL, to_regclass('public.orders') IS NOT NULL`).Scan(&inApp, &inPublic); err != nil {
		t.Fatal(err)
	}
	if !inApp || inPublic {
		t.Fatalf("orders in hg_app: %v, in public: %v; want only hg_app", inApp, inPublic)
	}
}
