package nodes

import (
	"context"
	"fmt"
	"net/url"

	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/postgres"
)

// ScratchDatabase creates a new, empty database on the server serverURL
// names (postgres:// or mysql://; its user needs the right to create
// databases), so that a soak never touches the URL's own data, and returns
// its URL and a function that drops it.
func ScratchDatabase(ctx context.Context, serverURL string) (url string, drop func(context.Context) error, err error) {
	kind, err := store.Kind(serverURL)
	if err != nil {
		return "", nil, err
	}
	switch kind {
	case store.KindPostgres:
		return postgres.CreateScratch(ctx, serverURL)
	case store.KindMySQL:
		return mysql.CreateScratch(ctx, serverURL)
	}
	return "", nil, fmt.Errorf("nodes: a cluster needs a shared database, postgres:// or mysql://, not %s", store.Redact(serverURL))
}

// SameDatabase returns serverURL with the database of dbURL: the URL of
// the scratch database ScratchDatabase made through one server of a
// cluster (a Galera node) as reached through another. Only the path
// changes; the user, host and parameters stay serverURL's.
func SameDatabase(serverURL, dbURL string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("nodes: %s: %w", store.Redact(serverURL), err)
	}
	d, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("nodes: %s: %w", store.Redact(dbURL), err)
	}
	u.Path, u.RawPath = d.Path, d.RawPath
	return u.String(), nil
}
