package postgres

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestScrub(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ msg, url, leak string }{
		{"cannot parse `postgres://u:pw@h/db`", "postgres://u:pw@h/db", "pw"},
		{"bad postgres://u:p@ss@host/db here", "postgres://u:p@ss@host/db", "p@ss"},
		{"user=u password=hunter2x", "postgres://u:hunter2x@h/db", "hunter2x"},
	} {
		got := scrub(tt.msg, tt.url)
		if strings.Contains(got, tt.leak) {
			t.Errorf("scrub(%q) = %q, still shows %q", tt.msg, got, tt.leak)
		}
	}
	if got := redact("postgres://u:secret@h:5432/db"); strings.Contains(got, "secret") {
		t.Errorf("redact = %q", got)
	}
}

// TestStartupErrorCodes covers the lines the test server cannot provoke
// (it trusts every login, so no wrong password).
func TestStartupErrorCodes(t *testing.T) {
	t.Parallel()
	s := &Store{cfg: Config{URL: "postgres://app:hunter2x@db.example:5432/shop"}, where: "app@db.example:5432/shop", schema: "public"}
	for _, tt := range []struct {
		code string
		want []string
	}{
		{"28P01", []string{`user "app"`, "wrong password", "db.example:5432"}},
		{"53300", []string{"no connection left", "MaxConns"}},
		{"42501", []string{`GRANT CREATE, USAGE ON SCHEMA "public" TO "app"`}},
	} {
		err := s.startupError("connect", &pgconn.PgError{Code: tt.code, Message: "msg with hunter2x"})
		msg := err.Error()
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not contain %q", tt.code, msg, w)
			}
		}
		if strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2x") {
			t.Errorf("%s: %q", tt.code, msg)
		}
	}
}

// TestPasswordParameterRedacted: a password given as a URL parameter
// (?password=, ?sslpassword=) is as secret as user:password@: no error and
// no log line of Validate or Open shows it, whether Open fails or succeeds.
func TestPasswordParameterRedacted(t *testing.T) {
	t.Parallel()
	const secret = "hunter2x"
	ctx := context.Background()
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var shown []string
	for _, raw := range []string{
		"postgresx://u@h/db?password=" + secret,
		"postgres://u@h/db?password=" + secret + "&sslmode=bogus",
		"postgres://u@127.0.0.1:1/db?sslpassword=" + secret + "&password=" + secret + "&connect_timeout=1",
		"postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=1",
	} {
		if _, err := Open(ctx, Config{URL: raw, Logger: log}); err == nil {
			t.Fatalf("Open(%s) succeeded", redact(raw))
		} else {
			shown = append(shown, err.Error())
		}
		shown = append(shown, redact(raw))
	}
	// A trusting server ignores the password: the store opens and logs.
	u, _ := url.Parse(pgtest.NewDatabase(t))
	q := u.Query()
	q.Set("password", secret)
	u.RawQuery = q.Encode()
	s, err := Open(ctx, Config{URL: u.String(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	shown = append(shown, logs.String())
	for _, text := range shown {
		if strings.Contains(text, secret) {
			t.Errorf("the password shows in %q", text)
		}
	}
}
