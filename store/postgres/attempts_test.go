package postgres

// What the shared suite cannot arrange on purpose: several delivery
// attempts in one group commit, racing ones for the same delivery among
// them.

import (
	"context"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/writer"
)

// runTogether queues ops so that one writer batch takes them all, and
// waits for them.
func runTogether(t *testing.T, s *Store, ops ...*batch.Op) {
	t.Helper()
	s.w.SubmitAll(context.Background(), writer.Normal, ops)
	for _, o := range ops {
		if o.Res.Err != nil {
			t.Fatalf("attempt %+v: %v", o.Attempt, o.Res.Err)
		}
	}
}

func TestAttemptsGroupCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s, _ := setupShared(t)
	w, err := s.CreateWebhook(ctx, hourglass.WebhookParams{URL: "http://127.0.0.1:1/", Secret: "0123456789abcdef", Events: []hourglass.EventType{hourglass.EventTypeAll}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	create := func() hourglass.Order {
		o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "W", Quantity: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	o1, o2 := create(), create()
	if _, err := s.TransitionOrder(ctx, o2.ID, hourglass.ActionCancel); err != nil {
		t.Fatal(err)
	}
	due, err := s.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: time.Now().Add(time.Hour), Limit: 10})
	if err != nil || len(due) != 3 {
		t.Fatalf("due deliveries = %v, %v; want 3", due, err)
	}
	byOrder := map[int64][]int64{}
	for _, d := range due {
		pd, err := s.PendingDelivery(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		byOrder[pd.OrderID] = append(byOrder[pd.OrderID], d.ID)
	}
	d1, d2a, d2b := byOrder[o1.ID][0], byOrder[o2.ID][0], byOrder[o2.ID][1]
	if d2b < d2a {
		d2a, d2b = d2b, d2a // the stream's order: created, then cancelled
	}
	attempt := func(r hourglass.AttemptResult) *batch.Op {
		r.WebhookID = w.ID
		return &batch.Op{Kind: batch.Attempt, Attempt: r}
	}
	later := time.Now().Add(time.Hour)
	ops := []*batch.Op{
		// Three workers racing on d1's first attempt: only the first counts.
		attempt(hourglass.AttemptResult{ID: d1, OrderID: o1.ID, OK: true}),
		attempt(hourglass.AttemptResult{ID: d1, OrderID: o1.ID, Error: "HTTP 500", RetryAt: later}),
		attempt(hourglass.AttemptResult{ID: d1, OrderID: o1.ID, Error: "HTTP 500"}),
		// The head of o2's stream delivered: the next is the cancel's.
		attempt(hourglass.AttemptResult{ID: d2a, OrderID: o2.ID, OK: true}),
		// A stale attempt count: not recorded.
		attempt(hourglass.AttemptResult{ID: d2b, OrderID: o2.ID, Attempts: 1, Error: "HTTP 500", RetryAt: later}),
	}
	runTogether(t, s, ops...)
	for i, want := range []bool{true, false, false, true, false} {
		if got := ops[i].Res.Record.Recorded; got != want {
			t.Errorf("attempt %d %+v: recorded %v, want %v", i, ops[i].Attempt, got, want)
		}
	}
	if next := ops[3].Res.Record.Next; next.ID != d2b {
		t.Errorf("next of o2's stream = %+v, want delivery %d", next, d2b)
	}
	if _, err := s.PendingDelivery(ctx, d1); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Errorf("delivered d1: PendingDelivery = %v, want not found", err)
	}
	if pd, err := s.PendingDelivery(ctx, d2b); err != nil || pd.Attempts != 0 {
		t.Errorf("d2b after a stale attempt = %+v, %v; want 0 attempts", pd, err)
	}

	// A retry and then a dead letter, each with its error, in one batch each.
	retry := attempt(hourglass.AttemptResult{ID: d2b, OrderID: o2.ID, Error: "HTTP 502", RetryAt: later})
	runTogether(t, s, retry)
	if pd, err := s.PendingDelivery(ctx, d2b); err != nil || !retry.Res.Record.Recorded || pd.Attempts != 1 ||
		hourglass.UnixMilli(pd.NextAttemptAt) != hourglass.UnixMilli(later) {
		t.Fatalf("after a retry: %+v (recorded %v), %v; want 1 attempt, next at %v", pd, retry.Res.Record.Recorded, err, later)
	}
	dead := attempt(hourglass.AttemptResult{ID: d2b, OrderID: o2.ID, Attempts: 1, Error: "HTTP 410"})
	runTogether(t, s, dead)
	if !dead.Res.Record.Recorded || dead.Res.Record.Next.ID != 0 {
		t.Fatalf("dead letter: %+v; want recorded, no next", dead.Res.Record)
	}
	dls, err := s.DeadLetters(ctx, hourglass.DeadLetterFilter{Limit: 10})
	if err != nil || len(dls) != 1 || dls[0].ID != d2b || dls[0].Attempts != 2 || dls[0].LastError != "HTTP 410" || dls[0].FailedAt.IsZero() {
		t.Fatalf("dead letters = %+v, %v; want d2b after 2 attempts with its error", dls, err)
	}
}
