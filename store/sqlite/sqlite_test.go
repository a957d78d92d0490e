package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/sqlite"
)

func open(t *testing.T, dir string, clock hourglass.Clock) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(sqlite.Config{Dir: dir, Clock: clock})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseStore(t, hourglasstest.StoreHarness{
		// No OpenShared: SQLite is one process per file.
		Open: func(t *testing.T, o hourglasstest.StoreOptions) hourglass.Database {
			s, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Clock: o.Clock, Outbox: o.Outbox})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	})
}

// TestReopenKeepsCommittedWrites checks that what a write returned survives
// closing and reopening the database, and that migrations run once.
func TestReopenKeepsCommittedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s := open(t, dir, clock)
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 5}); err != nil {
		t.Fatal(err)
	}
	o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 2}}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutPolicy(ctx, hourglass.Policy{DefaultTimeout: 7 * time.Minute, Categories: map[string]time.Duration{"v": time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "B", Available: 1}); hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
		t.Fatalf("write after Close = %v, want unavailable", err)
	}
	s2 := open(t, dir, clock)
	got, err := s2.Order(ctx, o.ID)
	if err != nil || got.Status != hourglass.StatePendingPayment || !got.Deadline.Equal(o.Deadline) {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	p, _ := s2.Policy(ctx)
	if p.DefaultTimeout != 7*time.Minute || p.Categories["v"] != time.Minute {
		t.Fatalf("policy after reopen: %+v", p)
	}
}

// TestCancelledContextSkipsQueuedWrite: a write whose caller gave up before
// it ran must not happen.
func TestCancelledContextSkipsQueuedWrite(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), hourglasstest.NewClock(hourglasstest.Epoch))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 5}); err == nil {
		t.Fatal("write with a cancelled context succeeded")
	}
	if _, err := s.Product(context.Background(), "A"); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("product exists after a cancelled write: %v", err)
	}
}

// BenchmarkCreateOrder creates orders from 64 callers at once: of one SKU
// (items=1), of five (items=5), or of one SKU picked at random among 1,000
// (skus=1000, the shape of BenchmarkHTTPCreateOrders' load, whose commits
// each update many products).
func BenchmarkCreateOrder(b *testing.B) {
	for _, c := range []struct {
		name        string
		items, skus int
	}{{"items=1", 1, 1}, {"items=5", 5, 5}, {"items=1,skus=1000", 1, 1000}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := sqlite.Open(sqlite.Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			skus := make([]string, c.skus)
			for i := range skus {
				skus[i] = fmt.Sprintf("SKU-%04d", i)
				if _, err := s.PutProduct(ctx, hourglass.Product{SKU: skus[i], Available: 1 << 40}); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism(64) // many concurrent API calls share each commit
			cpu0 := cpuTime(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 0))
				for pb.Next() {
					its := make([]hourglass.Item, c.items)
					for i := range its {
						sku := skus[i]
						if c.skus > c.items {
							sku = skus[r.IntN(c.skus)]
						}
						its[i] = hourglass.Item{SKU: sku, Quantity: 1}
					}
					if _, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: its, Timeout: time.Hour}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
			// CPU per order (the process's, user and system): what a create
			// costs whatever else the machine runs.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/order")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSecondStoreOnOneFileRefused: one SQLite file has one hourglass writer;
// a second Open of it fails with a line that says why, and succeeds once the
// first store is closed.
func TestSecondStoreOnOneFileRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := sqlite.Open(sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(sqlite.Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another hourglass process") {
		t.Fatalf("second Open = %v, want refused as in use", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := sqlite.Open(sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatalf("Open after the first closed: %v", err)
	}
	second.Close()
}
