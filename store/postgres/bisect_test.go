package postgres

import (
	"context"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestBrokenWriteBisected puts one write the server refuses (a user id with
// a NUL, which a text column cannot hold: 22021) among 64 good ones in one
// group commit, a close of 16 due orders among them. The batch is bisected:
// every good write commits in a transaction of at most half the batch, the
// close once, and the broken write alone fails, as an internal error; the
// batch costs at most 1 + 2·⌈log2 65⌉ = 15 transactions, where running each
// write alone after the failure took 66.
func TestBrokenWriteBisected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := hourglasstest.NewClock(time.Unix(1_800_000_000, 0))
	var (
		mu  sync.Mutex
		txs []int // the writes of each transaction
	)
	s, err := Open(ctx, Config{URL: pgtest.NewDatabase(t), MaxConns: 4, Clock: clock, beforeTx: func(writes int) {
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
	mu.Lock()
	txs = nil
	mu.Unlock()

	create := func(user string) *batch.Op {
		return &batch.Op{Kind: batch.Create, Create: hourglass.CreateOrderParams{UserID: user, Timeout: time.Minute, Items: items}, Items: stored.EncodeItems(items)}
	}
	var ops []*batch.Op
	for i := range 63 {
		if i == 20 {
			ops = append(ops, &batch.Op{Kind: batch.Close, IDs: due})
		}
		ops = append(ops, create("u"))
	}
	broken := create("bad\x00user")
	ops = append(ops[:41], append([]*batch.Op{broken}, ops[41:]...)...)
	s.w.SubmitAll(ctx, writer.Normal, ops) // one batch: a writer takes all of them

	for i, o := range ops {
		switch {
		case o == broken:
			if code := hourglass.ErrorCode(o.Res.Err); o.Res.Err == nil || code != hourglass.CodeInternal {
				t.Errorf("the broken write returned %v (code %s), want its own internal error", o.Res.Err, code)
			}
		case o.Res.Err != nil:
			t.Errorf("write %d (kind %d) failed with its batch: %v", i, o.Kind, o.Res.Err)
		case o.Kind == batch.Close && len(o.Res.Closed) != len(due):
			t.Errorf("the close closed %d orders, want %d", len(o.Res.Closed), len(due))
		case o.Kind == batch.Create && !o.Res.Created:
			t.Errorf("create %d: not created", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	limit := 1 + 2*bits.Len(uint(len(ops)-1))
	if len(txs) > limit || txs[0] != len(ops) {
		t.Fatalf("%d transactions %v, want the batch of %d then at most %d in all", len(txs), txs, len(ops), limit)
	}
	for _, n := range txs[1:] {
		if n > (len(ops)+1)/2 {
			t.Fatalf("transactions %v: a retry held more than half the batch", txs)
		}
	}
	p, err := s.Product(ctx, "A")
	if err != nil || p.Reserved != 63 || p.Available != 1000-63 {
		t.Fatalf("product %+v, %v: want the 63 good creates reserved and the 16 closed orders released", p, err)
	}
}
