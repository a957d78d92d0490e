package sqlite

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// TestBrokenWriteBisected puts one write that fails after writing among 64
// good ones in one group commit, a close of 16 due orders among them. The
// batch is bisected: every good write commits in a transaction of at most
// half the batch, the close once, and the broken write alone fails, with
// its own error and none of its rows; the batch costs at most
// 1 + 2·⌈log2 65⌉ = 15 transactions, where running each write alone after
// the failure took 66.
func TestBrokenWriteBisected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := hourglasstest.NewClock(time.Unix(1_800_000_000, 0))
	var (
		mu  sync.Mutex
		txs []int // the writes of each transaction
	)
	s, err := Open(Config{Dir: t.TempDir(), Clock: clock, beforeTx: func(writes int) {
		mu.Lock()
		txs = append(txs, writes)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Name: "A", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	items := []hourglass.Item{{SKU: "A", Quantity: 1}}
	var due []int64
	for range 16 {
		o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: items})
		if err != nil {
			t.Fatal(err)
		}
		due = append(due, o.ID)
	}
	clock.Advance(2 * time.Minute)

	release := holdWriter(s)
	mu.Lock()
	txs = nil
	mu.Unlock()
	var wg sync.WaitGroup
	errBroken := errors.New("disk on fire")
	var closed []hourglass.ClosedOrder
	var closeErr, brokenErr error
	wg.Add(2)
	go func() { defer wg.Done(); closed, closeErr = s.CloseOrders(ctx, due) }()
	go func() {
		defer wg.Done()
		brokenErr = s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
			if err := sqlitex.Execute(conn, `INSERT INTO products (sku, name, category, available) VALUES ('BAD', '', '', 1)`, nil); err != nil {
				return err
			}
			return errBroken
		})
	}()
	createErrs := make([]error, 63)
	for i := range createErrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, createErrs[i] = s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: items})
		}()
	}
	testenv.Eventually(t, 10*time.Second, "65 writes queued", func() bool { return s.w.Len() >= 65 })

	release()
	wg.Wait()

	if brokenErr != errBroken {
		t.Errorf("the broken write returned %v, want its own error", brokenErr)
	}
	if closeErr != nil || len(closed) != len(due) {
		t.Errorf("the close closed %d orders, %v; want %d", len(closed), closeErr, len(due))
	}
	for i, err := range createErrs {
		if err != nil {
			t.Errorf("create %d failed with its batch: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	const writes = 65
	limit := 1 + 2*bits.Len(uint(writes-1))
	if len(txs) > limit || txs[0] != writes {
		t.Fatalf("%d transactions %v, want the batch of %d then at most %d in all", len(txs), txs, writes, limit)
	}
	for _, n := range txs[1:] {
		if n > (writes+1)/2 {
			t.Fatalf("transactions %v: a retry held more than half the batch", txs)
		}
	}
	if p, err := s.Product(ctx, "A"); err != nil || p.Reserved != 63 || p.Available != 1000-63 {
		t.Fatalf("product %+v, %v: want the 63 good creates reserved and the 16 closed orders released", p, err)
	}
	if _, err := s.Product(ctx, "BAD"); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("the broken write's row survived: %v", err)
	}
}
