package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
)

// CreateScratch creates a new, empty database on the server rawURL names
// (named hourglass_scratch_<random>; the URL's user needs CREATE and DROP)
// and returns its URL and a function that drops it. It is for benchmarks
// that must not touch the URL's own database.
func CreateScratch(ctx context.Context, rawURL string) (scratchURL string, drop func(context.Context) error, err error) {
	cfg, err := myurl.Parse(rawURL)
	if err != nil {
		return "", nil, fmt.Errorf("mysql: %w", err)
	}
	name := "hourglass_scratch_" + strings.ToLower(rand.Text()[:12])
	exec := func(ctx context.Context, q string) error {
		connector, err := gomysql.NewConnector(cfg)
		if err != nil {
			return err
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		_, err = db.ExecContext(ctx, q)
		return err
	}
	if err := exec(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		return "", nil, fmt.Errorf("mysql: create scratch database %s on %s: %w", name, myurl.Redact(rawURL), err)
	}
	scratchURL, err = myurl.WithDatabase(rawURL, name)
	if err != nil {
		return "", nil, fmt.Errorf("mysql: %w", err)
	}
	return scratchURL, func(ctx context.Context) error {
		if err := exec(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			return fmt.Errorf("mysql: drop scratch database %s: %w", name, err)
		}
		return nil
	}, nil
}
