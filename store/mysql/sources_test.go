package mysql_test

import (
	"testing"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/storetest"
)

// TestSourcesConformance runs the suite with the shop's tables in a
// database of their own on hourglass's server, reached by qualified name;
// the shop's sessions are in another time zone (+05:00) and write UTC.
func TestSourcesConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseSources(t, hourglasstest.SourceHarness{
		Open: func(t *testing.T) (a, b hourglasstest.SourceDB, shop hourglasstest.Shop) {
			url, shopURL := mytest.NewDatabaseFrom(t, storetest.MySQLMigrated()), mytest.NewDatabase(t)
			cfg, err := myurl.Parse(shopURL)
			if err != nil {
				t.Fatal(err)
			}
			return open(t, url, nil, false), open(t, url, nil, false), hourglasstest.Shop{DB: shopDB(t, shopURL), Schema: cfg.DBName}
		},
	})
}

// TestGaleraSourcesConformance runs the suite on a 3-node Galera cluster:
// the two store values on nodes 1 and 2 (their closes of one row meet in
// certification), the shop on node 3, in a database of its own.
func TestGaleraSourcesConformance(t *testing.T) {
	t.Parallel()
	// In the Matrix tier (every other store): the whole suite on three
	// nodes costs the cluster minutes of CPU, and its Go side is
	// MariaDB's, which the Default tier runs under -race.
	testenv.Require(t, testenv.Matrix)
	galeratest.Nodes(t)
	hourglasstest.ExerciseSources(t, hourglasstest.SourceHarness{
		Open: func(t *testing.T) (a, b hourglasstest.SourceDB, shop hourglasstest.Shop) {
			urls, shops := galeratest.NewDatabaseFrom(t, storetest.MySQLMigrated()), galeratest.NewDatabase(t)
			cfg, err := myurl.Parse(shops[2])
			if err != nil {
				t.Fatal(err)
			}
			return open(t, urls[0], nil, false), open(t, urls[1], nil, false), hourglasstest.Shop{DB: shopDB(t, shops[2], "wsrep_sync_wait", "1"), Schema: cfg.DBName}
		},
		LocksElsewhere: true,
	})
}
