package postgres

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CreateScratch creates a new, empty database on the server rawURL names
// (named hourglass_scratch_<random>; the URL's user needs CREATEDB) and
// returns its URL and a function that drops it, ending its connections. It
// is for benchmarks that must not touch the URL's own database.
func CreateScratch(ctx context.Context, rawURL string) (scratchURL string, drop func(context.Context) error, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: database URL %s: %v", redact(rawURL), err)
	}
	name := "hourglass_scratch_" + strings.ToLower(rand.Text()[:12])
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, rawURL)
		if err != nil {
			return fmt.Errorf("postgres: connect to %s: %w", redact(rawURL), err)
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("postgres: create scratch database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), func(ctx context.Context) error {
		if err := exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("postgres: drop scratch database %s: %w", name, err)
		}
		return nil
	}, nil
}
