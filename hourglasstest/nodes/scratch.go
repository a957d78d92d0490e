package nodes

import (
	"context"
	"fmt"

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
