package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// TestBrokenWriteDoesNotFailItsBatch: when one write of a group commit fails
// with an unexpected error after writing, the batch is rolled back and
// bisected (TestBrokenWriteBisected counts its transactions): the good one
// commits, the broken one's rows are gone and only it gets the error.
func TestBrokenWriteDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	// Hold the writer, so the next two writes queue up and share a batch.
	release := holdWriter(s)
	good, bad := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := s.PutProduct(ctx, hourglass.Product{SKU: "GOOD", Available: 1})
		good <- err
	}()
	go func() {
		bad <- s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
			if err := sqlitex.Execute(conn, `INSERT INTO products (sku, name, category, available) VALUES ('BAD', '', '', 1)`, nil); err != nil {
				return err
			}
			return errors.New("disk on fire")
		})
	}()
	testenv.Eventually(t, 10*time.Second, "both writes queued", func() bool { return s.w.Len() == 2 })

	release()
	if err := <-good; err != nil {
		t.Fatalf("the good write failed with its batch: %v", err)
	}
	if err := <-bad; err == nil || err.Error() != "disk on fire" {
		t.Fatalf("the broken write returned %v, want its own error", err)
	}
	if _, err := s.Product(ctx, "GOOD"); err != nil {
		t.Fatalf("GOOD not committed: %v", err)
	}
	if _, err := s.Product(ctx, "BAD"); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("the broken write's row survived: %v", err)
	}
}

// TestUrgentWeightFollowsFanOut: a close batch weighs its orders times one
// plus the deliveries the latest close fanned out per order, so that with
// webhooks a commit holds fewer closes; without webhooks the weight is the
// order count again.
func TestUrgentWeightFollowsFanOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	first := seedBurst(t, s, "HOT", 30, time.Now().Add(-time.Second))
	closeTen := func(from int64) {
		t.Helper()
		ids := make([]int64, 10)
		for i := range ids {
			ids[i] = from + int64(i)
		}
		closed, err := s.CloseOrders(ctx, ids)
		if err != nil || len(closed) != 10 {
			t.Fatalf("CloseOrders = %d closed, %v; want 10", len(closed), err)
		}
	}
	closeTen(first)
	if got := s.urgentWeight(10); got != 10 {
		t.Fatalf("weight of 10 closes without webhooks = %d, want 10", got)
	}
	hooks := webhooks(t, s, 3)
	closeTen(first + 10)
	if got := s.urgentWeight(10); got != 40 {
		t.Fatalf("weight of 10 closes with 3 webhooks = %d, want 40", got)
	}
	for _, w := range hooks {
		if _, err := s.DeleteWebhook(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
	}
	closeTen(first + 20)
	if got := s.urgentWeight(10); got != 10 {
		t.Fatalf("weight of 10 closes after the webhooks were deleted = %d, want 10", got)
	}
}

// openTest opens a store in a temporary directory, closed when t ends.
func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// holdWriter keeps the writer busy with a write of its own until release
// is called, so that the writes submitted meanwhile queue up.
func holdWriter(s *Store) (release func()) {
	started, done := make(chan struct{}), make(chan struct{})
	go s.write(context.Background(), func(*sqlite.Conn, time.Time) error { close(started); <-done; return nil })
	<-started
	return func() { close(done) }
}
