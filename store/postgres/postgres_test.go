package postgres_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/store/storetest"
)

// testMaxConns keeps each test's pool small: tests run in parallel against
// one server with max_connections 100.
const testMaxConns = 4

// open opens a store on url, closed in t.Cleanup.
func open(t testing.TB, url string, clock hourglass.Clock, outbox bool) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, Clock: clock, Outbox: outbox, MaxConns: testMaxConns})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseStore(t, hourglasstest.StoreHarness{
		Open: func(t *testing.T, o hourglasstest.StoreOptions) hourglass.Database {
			return open(t, pgtest.NewDatabaseFrom(t, storetest.PostgresMigrated("")), o.Clock, o.Outbox)
		},
		OpenShared: func(t *testing.T, o hourglasstest.StoreOptions) (a, b hourglass.Database) {
			url := pgtest.NewDatabaseFrom(t, storetest.PostgresMigrated(""))
			return open(t, url, o.Clock, o.Outbox), open(t, url, o.Clock, o.Outbox)
		},
	})
}
