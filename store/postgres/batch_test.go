package postgres_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestBrokenWriteRetriedAlone puts a write the server rejects (an
// idempotency key too long for its index) among good ones: the group commit
// is rolled back and bisected (TestBrokenWriteBisected counts its
// transactions), and only the broken one fails, as an internal error (not a
// domain refusal, not unavailable).
func TestBrokenWriteRetriedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var batched atomic.Int64
	s, err := postgres.Open(ctx, postgres.Config{URL: pgtest.NewDatabase(t), MaxConns: 4,
		Observe: func(writes int, _ time.Duration) {
			if writes > 1 {
				batched.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mustProduct(t, s, "A", 1000)
	for round := 0; round < 20 && batched.Load() == 0; round++ {
		var (
			wg     sync.WaitGroup
			failed atomic.Int64
		)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}}
				if i == 20 {
					p.IdempotencyKey, p.RequestHash = strings.Repeat("k", 1<<20), []byte("h") // beyond a btree entry's size
				}
				_, _, err := s.CreateOrder(ctx, p)
				switch {
				case i == 20 && hourglass.ErrorCode(err) == hourglass.CodeInternal:
					failed.Add(1)
				case i == 20:
					t.Errorf("broken create = %v, want an internal error", err)
				case err != nil:
					t.Errorf("good create %d failed with its batch: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if failed.Load() != 1 {
			t.Fatalf("round %d: %d broken writes failed, want 1", round, failed.Load())
		}
	}
	if batched.Load() == 0 {
		t.Skip("no group commit held more than one write (machine too idle to batch)")
	}
	p, err := s.Product(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	if p.Available+p.Reserved != 1000 || p.Reserved%39 != 0 {
		t.Fatalf("stock %+v: want only the good creates reserved", p)
	}
}
