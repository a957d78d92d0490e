package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// deliveriesOf returns the delivery ids of an order's events, by event.
func deliveriesOf(t *testing.T, s *Store, orderID int64) []int64 {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT id FROM webhook_deliveries WHERE order_id = $1 ORDER BY id`, orderID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestBurstFanOutDeferred: a close batch with another close queued behind
// it leaves its events' deliveries to fanOutLoop, which creates them once
// the close path has no queue; the last close batch of the burst fans out
// in its own transaction. Every close event reaches every subscribed
// webhook once.
func TestBurstFanOutDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := hourglasstest.NewClock(time.Unix(1_800_000_000, 0))
	release := make(chan struct{})
	var once sync.Once
	s, err := Open(ctx, Config{URL: pgtest.NewDatabase(t), MaxConns: 4, MaxBatch: 1, Clock: clock, beforeFanOut: func() { <-release }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Close
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "W", Name: "W", Category: "x", Available: 100}); err != nil {
		t.Fatal(err)
	}
	for _, events := range [][]hourglass.EventType{{hourglass.EventTypeAll}, {hourglass.EventFor(hourglass.StateClosed)}} {
		if _, err := s.CreateWebhook(ctx, hourglass.WebhookParams{URL: "http://127.0.0.1:1/", Secret: "0123456789abcdef", Events: events}, 0); err != nil {
			t.Fatal(err)
		}
	}
	var ids [2][]int64
	for i := range ids {
		for range 3 {
			o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "W", Quantity: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = append(ids[i], o.ID)
		}
	}
	clock.Advance(time.Minute)
	// Two close batches queued together: with MaxBatch 1 the first runs
	// with the second queued behind it.
	ops := []*batch.Op{{Kind: batch.Close, IDs: ids[0]}, {Kind: batch.Close, IDs: ids[1]}}
	s.w.SubmitAll(ctx, writer.Urgent, ops)
	for i, o := range ops {
		if o.Res.Err != nil || len(o.Res.Closed) != 3 {
			t.Fatalf("close batch %d: %d closed, %v", i, len(o.Res.Closed), o.Res.Err)
		}
	}
	// The first batch deferred its close deliveries; the second, the last
	// of the burst, wrote them.
	if pending, err := s.FanoutPending(ctx); err != nil || pending != 1 {
		t.Fatalf("FanoutPending: %d rows, %v; want the first batch's", pending, err)
	}
	if got := deliveriesOf(t, s, ids[0][0]); len(got) != 1 {
		t.Fatalf("a deferring batch's order has deliveries %v, want its created event's only", got)
	}
	if got := deliveriesOf(t, s, ids[1][0]); len(got) != 3 {
		t.Fatalf("the last batch's order has deliveries %v, want 3", got)
	}
	// The note is fanned out an hour after its events: its deliveries are
	// due then, not at the events' commit time, which the owners' scans of
	// new deliveries (ScanLag back) have long passed.
	clock.Advance(time.Hour)
	fannedAt := hourglass.UnixMilli(clock.Now())
	once.Do(func() { close(release) })
	// Each order: its created event to one webhook, its closed event to two.
	testenv.Eventually(t, 10*time.Second, "the deferred deliveries", func() bool { return len(deliveriesOf(t, s, ids[0][2])) == 3 })
	var early int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.order_id = ANY($1) AND e.type = 'order.closed' AND d.next_attempt_at < $2`, ids[0], fannedAt).Scan(&early); err != nil || early != 0 {
		t.Fatalf("%d deferred deliveries due before their fan-out (%v); want none", early, err)
	}
	for i := range ids {
		for _, id := range ids[i] {
			if got := deliveriesOf(t, s, id); len(got) != 3 {
				t.Fatalf("order %d (batch %d): deliveries %v, want 3", id, i, got)
			}
		}
	}
	if left, err := s.FanoutPending(ctx); err != nil || left != 0 {
		t.Fatalf("FanoutPending: %d rows, %v; want none", left, err)
	}
}

// TestDeferredFanOutLeftOver: a fanout_pending row left by another process
// (or one that crashed) is fanned out by the periodic look, and an event
// it lists is not pruned meanwhile.
func TestDeferredFanOutLeftOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s, _ := setupShared(t)
	if _, err := s.CreateWebhook(ctx, hourglass.WebhookParams{URL: "http://127.0.0.1:1/", Secret: "0123456789abcdef", Events: []hourglass.EventType{hourglass.EventTypeAll}}, 0); err != nil {
		t.Fatal(err)
	}
	o2, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "W", Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	// Its delivery taken back and left as a deferred fan-out.
	var seq int64
	if err := s.pool.QueryRow(ctx, `DELETE FROM webhook_deliveries WHERE order_id = $1 RETURNING event_seq`, o2.ID).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO fanout_pending (seqs) VALUES (ARRAY[$1::bigint])`, seq); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneEvents(ctx, time.Now().Add(time.Hour), 10); n != 0 || err != nil {
		t.Fatalf("PruneEvents = %d, %v; want the event kept while its fan-out is pending", n, err)
	}
	testenv.Eventually(t, 10*time.Second, "the left-over fan-out", func() bool { return len(deliveriesOf(t, s, o2.ID)) == 1 })
}
