package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// TestBrokenWriteDoesNotFailItsBatch: when one write of a group commit fails
// with an unexpected error after writing, the batch is rolled back and each
// write is retried alone: the good one commits, the broken one's rows are
// gone and only it gets the error.
func TestBrokenWriteDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Hold the writer, so the next two writes queue up and share a batch.
	started, release := make(chan struct{}), make(chan struct{})
	go s.write(ctx, func(*sqlite.Conn, time.Time) error { close(started); <-release; return nil })
	<-started
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
	for {
		if s.queue.Len() == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
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
