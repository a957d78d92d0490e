package mysql

// What the shared suite cannot arrange on purpose: several delivery
// attempts in one group commit (racing ones for the same delivery among
// them), and a close batch that defers its fan-out.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// openOneWriter opens a store with one writer (MaxConns below 4) taking
// at most maxBatch ops per batch.
func openOneWriter(t *testing.T, maxBatch int, beforeFanOut func()) (*Store, *hourglasstest.Clock) {
	t.Helper()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	s, err := Open(context.Background(), Config{URL: mytest.NewDatabase(t), Clock: clock, MaxConns: 3, MaxBatch: maxBatch, beforeFanOut: beforeFanOut})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.PutProduct(context.Background(), hourglass.Product{SKU: "W", Name: "W", Category: "x", Available: 1000}); err != nil {
		t.Fatal(err)
	}
	return s, clock
}

func webhookFor(t *testing.T, s *Store, events ...hourglass.EventType) hourglass.Webhook {
	t.Helper()
	w, err := s.CreateWebhook(context.Background(), hourglass.WebhookParams{URL: "http://127.0.0.1:1/", Secret: "0123456789abcdef", Events: events}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func createW(t *testing.T, s *Store) hourglass.Order {
	t.Helper()
	o, _, err := s.CreateOrder(context.Background(), hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "W", Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// runTogether queues ops so that one writer batch takes them all, and
// returns their results.
func runTogether(t *testing.T, s *Store, urgent bool, ops ...*batch.Op) []batch.Result {
	t.Helper()
	lane := writer.Normal
	if urgent {
		lane = writer.Urgent
	}
	s.w.SubmitAll(context.Background(), lane, ops)
	out := make([]batch.Result, len(ops))
	for i, o := range ops {
		out[i] = o.Res
		if out[i].Err != nil {
			t.Fatalf("op %d: %v", i, out[i].Err)
		}
	}
	return out
}

// deliveryIDs returns the delivery ids of an order's events, ascending.
func deliveryIDs(t *testing.T, s *Store, orderID int64) []int64 {
	t.Helper()
	rows, err := s.db.Query(`SELECT id FROM webhook_deliveries WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestAttemptsGroupCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := openOneWriter(t, 0, nil)
	w := webhookFor(t, s, hourglass.EventTypeAll)
	o1, o2 := createW(t, s), createW(t, s)
	if _, err := s.TransitionOrder(ctx, o2.ID, hourglass.ActionCancel); err != nil {
		t.Fatal(err)
	}
	d1, d2 := deliveryIDs(t, s, o1.ID), deliveryIDs(t, s, o2.ID)
	if len(d1) != 1 || len(d2) != 2 {
		t.Fatalf("deliveries %v, %v; want 1 and 2", d1, d2)
	}
	attempt := func(r hourglass.AttemptResult) *batch.Op {
		r.WebhookID = w.ID
		return &batch.Op{Kind: batch.Attempt, Attempt: r}
	}
	later := clock.Now().Add(time.Hour)
	res := runTogether(t, s, false,
		// Three workers racing on d1's first attempt: only the first counts.
		attempt(hourglass.AttemptResult{ID: d1[0], OrderID: o1.ID, OK: true}),
		attempt(hourglass.AttemptResult{ID: d1[0], OrderID: o1.ID, Error: "HTTP 500", RetryAt: later}),
		attempt(hourglass.AttemptResult{ID: d1[0], OrderID: o1.ID, Error: "HTTP 500"}),
		// The head of o2's stream delivered: the next is the cancel's.
		attempt(hourglass.AttemptResult{ID: d2[0], OrderID: o2.ID, OK: true}),
		// A stale attempt count: not recorded.
		attempt(hourglass.AttemptResult{ID: d2[1], OrderID: o2.ID, Attempts: 1, Error: "HTTP 500", RetryAt: later}),
	)
	for i, want := range []bool{true, false, false, true, false} {
		if got := res[i].Record.Recorded; got != want {
			t.Errorf("attempt %d: recorded %v, want %v", i, got, want)
		}
	}
	if next := res[3].Record.Next; next.ID != d2[1] {
		t.Errorf("next of o2's stream = %+v, want delivery %d", next, d2[1])
	}
	if got := deliveryIDs(t, s, o1.ID); len(got) != 0 {
		t.Errorf("delivered d1 still there: %v", got)
	}
	if pd, err := s.PendingDelivery(ctx, d2[1]); err != nil || pd.Attempts != 0 {
		t.Errorf("after a stale attempt = %+v, %v; want 0 attempts", pd, err)
	}

	// A retry and then a dead letter of the same delivery in one batch: in
	// queue order, both recorded.
	res = runTogether(t, s, false,
		attempt(hourglass.AttemptResult{ID: d2[1], OrderID: o2.ID, Error: "HTTP 502", RetryAt: later}),
		attempt(hourglass.AttemptResult{ID: d2[1], OrderID: o2.ID, Attempts: 1, Error: "HTTP 410"}),
	)
	if !res[0].Record.Recorded || !res[1].Record.Recorded || res[1].Record.Next.ID != 0 {
		t.Fatalf("retry then dead letter: %+v, %+v; want both recorded, no next", res[0].Record, res[1].Record)
	}
	dls, err := s.DeadLetters(ctx, hourglass.DeadLetterFilter{Limit: 10})
	if err != nil || len(dls) != 1 || dls[0].ID != d2[1] || dls[0].Attempts != 2 || dls[0].LastError != "HTTP 410" || !dls[0].FailedAt.Equal(clock.Now()) {
		t.Fatalf("dead letters = %+v, %v; want d2's second after 2 attempts with its error", dls, err)
	}
}

// TestBurstFanOutDeferred: a close batch with another close queued behind
// it leaves its events' deliveries to fanOutLoop, which creates them once
// the close path has no queue; the last close batch of the burst fans out
// in its own transaction. Every close event reaches every subscribed
// webhook once, and an event whose fan-out is pending is not pruned.
func TestBurstFanOutDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	release := make(chan struct{})
	var once sync.Once
	s, clock := openOneWriter(t, 1, func() { <-release })
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Close
	webhookFor(t, s, hourglass.EventTypeAll)
	webhookFor(t, s, hourglass.EventOrderClosed)
	var ids [2][]int64
	for i := range ids {
		for range 3 {
			ids[i] = append(ids[i], createW(t, s).ID)
		}
	}
	clock.Advance(time.Minute)
	// Two close batches queued together: with MaxBatch 1 the first runs
	// with the second queued behind it.
	res := runTogether(t, s, true, &batch.Op{Kind: batch.Close, IDs: ids[0]}, &batch.Op{Kind: batch.Close, IDs: ids[1]})
	for i, r := range res {
		if len(r.Closed) != 3 {
			t.Fatalf("close batch %d closed %d", i, len(r.Closed))
		}
	}
	// The first batch deferred its close deliveries; the second, the last
	// of the burst, wrote them.
	var pending int
	if err := s.db.QueryRow(`SELECT count(*) FROM fanout_pending`).Scan(&pending); err != nil || pending != 1 {
		t.Fatalf("fanout_pending: %d rows, %v; want the first batch's", pending, err)
	}
	if got, want := len(deliveryIDs(t, s, ids[0][0])), 1; got != want {
		t.Fatalf("a deferring batch's order has %d deliveries, want %d (its created event's)", got, want)
	}
	// The note is fanned out an hour after its events: its deliveries are
	// due then, not at the events' commit time, which the owners' scans of
	// new deliveries (ScanLag back) have long passed.
	clock.Advance(time.Hour)
	fannedAt := hourglass.UnixMilli(clock.Now())
	once.Do(func() { close(release) })
	// Each order: its created event to one webhook, its closed event to two.
	testenv.Eventually(t, 10*time.Second, "the deferred deliveries", func() bool { return len(deliveryIDs(t, s, ids[0][2])) == 3 })
	var early int
	if err := s.db.QueryRow(`SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
WHERE d.order_id IN (?, ?, ?) AND e.type = 'order.closed' AND d.next_attempt_at < ?`, ids[0][0], ids[0][1], ids[0][2], fannedAt).Scan(&early); err != nil || early != 0 {
		t.Fatalf("%d deferred deliveries due before their fan-out (%v); want none", early, err)
	}
	for i := range ids {
		for _, id := range ids[i] {
			if got := deliveryIDs(t, s, id); len(got) != 3 {
				t.Fatalf("order %d (batch %d): deliveries %v, want 3", id, i, got)
			}
		}
	}

	// A left-over row (a crashed process's) is fanned out by the periodic
	// look, and its event is kept by pruning meanwhile.
	o := createW(t, s)
	var seq int64
	if err := s.db.QueryRow(`SELECT event_seq FROM webhook_deliveries WHERE order_id = ?`, o.ID).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`DELETE FROM webhook_deliveries WHERE order_id = ?`, o.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`INSERT INTO fanout_pending (seqs) VALUES (?)`, fmt.Sprint(seq)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneEvents(ctx, clock.Now().Add(time.Hour), 1000); err != nil {
		t.Fatal(err)
	} else if evs, _ := s.OrderEvents(ctx, o.ID); len(evs) != 1 {
		t.Fatalf("pruned %d; order %d's events %v: want its pending event kept", n, o.ID, evs)
	}
	testenv.Eventually(t, 10*time.Second, "the left-over fan-out", func() bool { return len(deliveryIDs(t, s, o.ID)) == 1 })

}
