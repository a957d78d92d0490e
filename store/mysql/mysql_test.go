package mysql_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/storetest"
)

// open opens a store on url, closed in t.Cleanup.
func open(t testing.TB, url string, clock hourglass.Clock, outbox bool) *mysql.Store {
	t.Helper()
	cfg := mysql.Config{URL: url, Outbox: outbox}
	if clock != nil {
		cfg.Clock = clock
	}
	s, err := mysql.Open(context.Background(), cfg)
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
			return open(t, mytest.NewDatabaseFrom(t, storetest.MySQLMigrated()), o.Clock, o.Outbox)
		},
		OpenShared: func(t *testing.T, o hourglasstest.StoreOptions) (a, b hourglass.Database) {
			url := mytest.NewDatabaseFrom(t, storetest.MySQLMigrated())
			return open(t, url, o.Clock, o.Outbox), open(t, url, o.Clock, o.Outbox)
		},
	})
}
