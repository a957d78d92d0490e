package mysql_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/storetest"
)

// TestGaleraConformance runs the conformance suite on a 3-node Galera
// cluster: every case on node 1, and the cases with two store values with
// one on node 1 and the other on node 2.
func TestGaleraConformance(t *testing.T) {
	t.Parallel()
	// In the Matrix tier (every other store): the whole suite on three
	// nodes costs the cluster minutes of CPU, and its Go side is
	// MariaDB's, which the Default tier runs under -race.
	testenv.Require(t, testenv.Matrix)
	galeratest.Nodes(t)
	hourglasstest.ExerciseStore(t, hourglasstest.StoreHarness{
		Open: func(t *testing.T, o hourglasstest.StoreOptions) hourglass.Database {
			return open(t, galeratest.NewDatabaseFrom(t, storetest.MySQLMigrated())[0], o.Clock, o.Outbox)
		},
		OpenShared: func(t *testing.T, o hourglasstest.StoreOptions) (a, b hourglass.Database) {
			urls := galeratest.NewDatabaseFrom(t, storetest.MySQLMigrated())
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

// retryCounts counts Config.ObserveRetry's calls by reason.
type retryCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *retryCounts) observe(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
}

func (c *retryCounts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// certFailures sums wsrep_local_cert_failures and wsrep_local_bf_aborts
// over the nodes: the conflicts Galera itself counted.
func certFailures(t *testing.T, urls []string) (cert, bf int64) {
	t.Helper()
	for _, u := range urls {
		var c, b int64
		err := mytest.Admin(t, u).QueryRow(`SELECT
	(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_CERT_FAILURES'),
	(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_BF_ABORTS')`).Scan(&c, &b)
		if err != nil {
			t.Fatal(err)
		}
		cert += c
		bf += b
	}
	return cert, bf
}

// TestGaleraHotSKUConflicts: three stores, one per node, create orders on
// one hot SKU at once, then pay or cancel them, each through a node other
// than the one that created it. Every batch writes the SKU's row, so the
// nodes' batches conflict at certification: each conflict is retried (and
// counted), no order is refused for any reason but stock, none oversells,
// and the stock is conserved.
func TestGaleraHotSKUConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urls := galeratest.NewDatabase(t)
	var counts retryCounts
	stores := make([]*mysql.Store, len(urls))
	for i, u := range urls {
		s, err := mysql.Open(ctx, mysql.Config{URL: u, ObserveRetry: counts.observe})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	const stock, perNode = 300, 200 // 600 attempts for 300 units
	put(t, stores[0], "HOT", stock)
	certBefore, bfBefore := certFailures(t, urls)

	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		created         []hourglass.Order
		refused, failed atomic.Int64
		paid, cancelled atomic.Int64
		start           = make(chan struct{})
	)
	for n, s := range stores {
		for g := range perNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint("u", n, "-", g),
					Items: []hourglass.Item{{SKU: "HOT", Quantity: 1}}, Timeout: time.Hour})
				switch {
				case err == nil:
					mu.Lock()
					created = append(created, o)
					mu.Unlock()
				case hourglass.ErrorCode(err) == hourglass.CodeInsufficientStock:
					refused.Add(1)
				default:
					failed.Add(1)
					t.Errorf("create on node %d: %v", n+1, err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if len(created) != stock || refused.Load() != int64(len(stores)*perNode-stock) {
		t.Fatalf("%d created, %d refused, %d failed; want %d created and the rest refused", len(created), refused.Load(), failed.Load(), stock)
	}
	afterCreates := counts.snapshot()

	for i, o := range created {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[(i+1)%len(stores)]
			if i%3 == 0 {
				if _, err := s.TransitionOrder(ctx, o.ID, hourglass.ActionCancel); err != nil {
					t.Errorf("cancel %d: %v", o.ID, err)
					return
				}
				cancelled.Add(1)
				return
			}
			if _, err := s.PayOrder(ctx, o.ID, fmt.Sprint("pay-", o.ID)); err != nil {
				t.Errorf("pay %d: %v", o.ID, err)
				return
			}
			paid.Add(1)
		}()
	}
	wg.Wait()
	for i, s := range stores {
		got := stockOf(t, s, "HOT")
		want := [3]int64{stock - int64(len(created)) + cancelled.Load(), int64(len(created)) - paid.Load() - cancelled.Load(), paid.Load()}
		if got != want {
			t.Fatalf("node %d: stock (available, reserved, sold) = %v, want %v", i+1, got, want)
		}
	}
	retried := counts.snapshot()
	cert, bf := certFailures(t, urls)
	t.Logf("retries after the creates: %v; after the payments and cancels: %v; Galera counted %d certification failures and %d brute-force aborts",
		afterCreates, retried, cert-certBefore, bf-bfBefore)
	if retried[mysql.RetryCertification] == 0 {
		t.Fatalf("no certification conflict was retried (%v): the test did not make the nodes conflict", retried)
	}
	if retried[mysql.RetryDeadlock] != 0 {
		t.Fatalf("retries %v: on Galera a 1213 is counted as certification", retried)
	}
	// Every conflict the store retried is one Galera counted (other tests
	// running at once only add to Galera's counters).
	if got := int64(retried[mysql.RetryCertification]); got > cert-certBefore+bf-bfBefore {
		t.Fatalf("%d certification retries counted, but Galera saw only %d certification failures and %d brute-force aborts",
			got, cert-certBefore, bf-bfBefore)
	}
}
