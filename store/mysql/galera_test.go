package mysql_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
)

// TestGaleraConformance runs the conformance suite on a 3-node Galera
// cluster: every case on node 1, and the cases with two store values with
// one on node 1 and the other on node 2.
func TestGaleraConformance(t *testing.T) {
	t.Parallel()
	galeratest.Nodes(t)
	hourglasstest.ExerciseStore(t, hourglasstest.StoreHarness{
		Open: func(t *testing.T, o hourglasstest.StoreOptions) hourglass.Database {
			return open(t, galeratest.NewDatabase(t)[0], o.Clock, o.Outbox)
		},
		OpenShared: func(t *testing.T, o hourglasstest.StoreOptions) (a, b hourglass.Database) {
			urls := galeratest.NewDatabase(t)
			return open(t, urls[0], o.Clock, o.Outbox), open(t, urls[1], o.Clock, o.Outbox)
		},
	})
}

// TestGaleraMigrateOnceAcrossNodes: processes starting at once on the three
// nodes of a new database apply each migration once (GET_LOCK is a node's
// own lock on Galera; the migration lock must hold across nodes).
func TestGaleraMigrateOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	urls := galeratest.NewDatabase(t)
	ms, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	const perNode = 4
	var (
		wg      sync.WaitGroup
		applied atomic.Int64
		start   = make(chan struct{})
	)
	for i := range perNode * len(urls) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n, err := mysql.Migrate(context.Background(), mysql.Config{URL: urls[i%len(urls)], MaxConns: 2})
			if err != nil {
				t.Errorf("migrate on node %d: %v", i%len(urls)+1, err)
			}
			applied.Add(int64(n))
		}()
	}
	close(start)
	wg.Wait()
	if got := applied.Load(); got != int64(len(ms)) {
		t.Fatalf("%d processes applied %d migrations in all; want each of the %d applied once", perNode*len(urls), got, len(ms))
	}
	for i, u := range urls {
		st, err := mysql.MigrationStatus(context.Background(), mysql.Config{URL: u})
		if err != nil || migrate.Pending(st) != 0 {
			t.Fatalf("node %d: status %v, %v; want every migration applied", i+1, st, err)
		}
	}
}
