package hourglasstest

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseAttemptLog checks hourglass.AttemptLog: every recorded attempt,
// and only those, is in the log of its event's subject with what the
// webhook service said of it (time, duration, status, error, outcome),
// the delivered ones too (whose delivery rows are gone); the log reads
// one subject's latest attempts, oldest first; retention prunes by age.
func exerciseAttemptLog(t *testing.T, h StoreHarness) {
	f := setupStore(t, h)
	f.product(t, "A", "x", 1000)
	w := f.webhook(t, "all", hourglass.EventTypeAll)
	o1 := f.create(t, time.Minute, item("A", 1))
	o2 := f.create(t, time.Minute, item("A", 1))
	ds := f.pendingDeliveries(t)
	if len(ds) != 2 {
		t.Fatalf("%d deliveries, want 2", len(ds))
	}
	byOrder := map[int64]hourglass.PendingDelivery{}
	for _, d := range ds {
		byOrder[d.OrderID] = d
	}
	d1, d2 := byOrder[o1.ID], byOrder[o2.ID]
	record := func(r hourglass.AttemptResult) bool {
		t.Helper()
		d := byOrder[r.OrderID]
		r.WebhookID, r.EventID, r.EventType = w.ID, d.EventID, d.EventType
		rec, err := f.db.RecordAttempt(f.ctx, r)
		if err != nil {
			t.Fatalf("RecordAttempt(%+v): %v", r, err)
		}
		return rec.Recorded
	}
	t0 := f.clock.Now()
	// o1: a failure, then delivered; o2: a failure and a stale record.
	if !record(hourglass.AttemptResult{ID: d1.ID, OrderID: o1.ID, Attempts: 0, Error: "HTTP 503: busy", RetryAt: t0.Add(time.Second),
		At: t0, Duration: 1500 * time.Millisecond, StatusCode: 503}) {
		t.Fatal("first attempt not recorded")
	}
	if !record(hourglass.AttemptResult{ID: d1.ID, OrderID: o1.ID, Attempts: 1, OK: true, At: t0.Add(2 * time.Second), Duration: 7 * time.Millisecond, StatusCode: 204}) {
		t.Fatal("second attempt not recorded")
	}
	if !record(hourglass.AttemptResult{ID: d2.ID, OrderID: o2.ID, Attempts: 0, Error: "dial tcp: refused", RetryAt: t0.Add(time.Second), At: t0}) {
		t.Fatal("o2's attempt not recorded")
	}
	if record(hourglass.AttemptResult{ID: d2.ID, OrderID: o2.ID, Attempts: 0, OK: true, At: t0}) {
		t.Fatal("a stale attempt was recorded")
	}
	got, err := f.db.DeliveryAttempts(f.ctx, o1.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []hourglass.DeliveryAttempt{
		{OrderID: o1.ID, DeliveryID: d1.ID, WebhookID: w.ID, EventID: d1.EventID, EventType: hourglass.EventOrderCreated, Attempt: 1,
			At: t0, Duration: 1500 * time.Millisecond, StatusCode: 503, Outcome: hourglass.AttemptRetry, Error: "HTTP 503: busy"},
		{OrderID: o1.ID, DeliveryID: d1.ID, WebhookID: w.ID, EventID: d1.EventID, EventType: hourglass.EventOrderCreated, Attempt: 2,
			At: t0.Add(2 * time.Second), Duration: 7 * time.Millisecond, StatusCode: 204, Outcome: hourglass.AttemptDelivered},
	}
	if len(got) != len(want) {
		t.Fatalf("o1's attempts: %+v; want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		g.ID = 0
		if !g.At.Equal(want[i].At) {
			t.Errorf("attempt %d at %v, want %v", i, g.At, want[i].At)
		}
		g.At = want[i].At
		if g != want[i] {
			t.Errorf("attempt %d: %+v; want %+v", i, g, want[i])
		}
	}
	if len(got) == 2 && got[0].ID >= got[1].ID {
		t.Errorf("attempt ids %d, %d: want ascending", got[0].ID, got[1].ID)
	}
	if got, err := f.db.DeliveryAttempts(f.ctx, o2.ID, 0); err != nil || len(got) != 1 || got[0].StatusCode != 0 || got[0].Error != "dial tcp: refused" {
		t.Fatalf("o2's attempts: %+v, %v; want the one failure without a status", got, err)
	}
	// The latest first when limited, still returned oldest first.
	if got, err := f.db.DeliveryAttempts(f.ctx, o1.ID, 1); err != nil || len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("o1's latest attempt: %+v, %v; want attempt 2", got, err)
	}
	if got, err := f.db.DeliveryAttempts(f.ctx, 424242, 0); err != nil || len(got) != 0 {
		t.Fatalf("an unknown subject's attempts: %+v, %v", got, err)
	}
	// Retention: attempts before t0+1s go (o1's first and o2's), one stays.
	n, err := f.db.PruneDeliveryAttempts(f.ctx, t0.Add(time.Second), 100)
	if err != nil || n != 2 {
		t.Fatalf("PruneDeliveryAttempts: %d, %v; want 2", n, err)
	}
	if got, err := f.db.DeliveryAttempts(f.ctx, o1.ID, 0); err != nil || len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("after pruning, o1's attempts: %+v, %v; want attempt 2 alone", got, err)
	}
}
