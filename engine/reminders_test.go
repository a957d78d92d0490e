package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
)

// remindRecorder is a recorder that also records reminders.
type remindRecorder struct {
	*recorder
	mu       sync.Mutex
	reminded []hourglass.RemindedOrder
	changed  chan struct{}
}

func (r *remindRecorder) Reminded(x hourglass.RemindedOrder, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reminded = append(r.reminded, x)
	close(r.changed)
	r.changed = make(chan struct{})
}

// await waits (real time, up to 30 s) until n reminders were settled.
func (r *remindRecorder) await(t *testing.T, n int) []hourglass.RemindedOrder {
	t.Helper()
	limit := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		got, changed := append([]hourglass.RemindedOrder(nil), r.reminded...), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-limit:
			t.Fatalf("%d reminders settled (%+v), want %d", len(got), got, n)
		}
	}
}

func remindSetup(t *testing.T, clock *hourglasstest.Clock) (fixture, *remindRecorder) {
	t.Helper()
	f := setup(t, clock)
	if err := f.store.PutPolicy(f.ctx, hourglass.Policy{DefaultTimeout: 30 * time.Second, RemindBefore: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return f, &remindRecorder{recorder: f.rec, changed: make(chan struct{})}
}

func expiringEvents(t *testing.T, f fixture, id int64) int {
	t.Helper()
	evs, err := f.store.OrderEvents(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Type == hourglass.EventOrderExpiring {
			n++
		}
	}
	return n
}

// TestReminders: the default mechanism sends a pending order's reminder
// at its remind_at, not a paid one's, and an extended one's at its new
// time, once.
func TestReminders(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f, rec := remindSetup(t, clock)
	cfg := Config{Clock: clock, Observer: rec}
	e, err := New(f.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for !e.Ready() {
		time.Sleep(time.Millisecond)
	}
	pending, paid, extended := f.create(t, 0), f.create(t, 0), f.create(t, 0)
	if _, err := f.store.PayOrder(f.ctx, paid.ID, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ExtendOrder(f.ctx, hourglass.ExtendOrderParams{ID: extended.ID, By: 15 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20*time.Second - time.Millisecond)
	time.Sleep(20 * time.Millisecond) // nothing is due: give a wrong delivery the chance to show
	if got := rec.await(t, 0); len(got) != 0 {
		t.Fatalf("reminders before remind_at: %+v", got)
	}
	clock.Advance(time.Millisecond)
	got := rec.await(t, 1)
	if got[0].OrderID != pending.ID || got[0].Skipped || !got[0].SentAt.Equal(hourglasstest.Epoch.Add(20*time.Second)) {
		t.Fatalf("at 20 s: %+v, want order %d's reminder sent at 20 s", got, pending.ID)
	}
	clock.Advance(15 * time.Second) // 35 s: the extended order's, and the first's close
	got = rec.await(t, 2)
	if got[1].OrderID != extended.ID || got[1].Skipped || !got[1].RemindAt.Equal(hourglasstest.Epoch.Add(35*time.Second)) {
		t.Fatalf("at 35 s: %+v, want order %d's reminder due at 35 s", got[1], extended.ID)
	}
	waitClosed(t, f.rec, 1)
	for id, want := range map[int64]int{pending.ID: 1, paid.ID: 0, extended.ID: 1} {
		if n := expiringEvents(t, f, id); n != want {
			t.Errorf("order %d: %d order.expiring events, want %d", id, n, want)
		}
	}
}

// TestRemindersRecovery: reminders whose time passed while no engine ran
// are sent at start-up when their order's deadline is still ahead, and
// skipped (no event) when it passed too.
func TestRemindersRecovery(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f, rec := remindSetup(t, clock)
	overdue := f.create(t, 0) // reminds at 20 s, closes at 30 s
	clock.Advance(15 * time.Second)
	ahead := f.create(t, 0)         // reminds at 35 s, closes at 45 s
	clock.Advance(25 * time.Second) // 40 s: both reminders passed, the first deadline too
	e, err := New(f.store, Config{Clock: clock, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	got := rec.await(t, 2)
	byID := map[int64]hourglass.RemindedOrder{got[0].OrderID: got[0], got[1].OrderID: got[1]}
	if r := byID[overdue.ID]; !r.Skipped {
		t.Errorf("overdue order's reminder %+v, want skipped", r)
	}
	if r := byID[ahead.ID]; r.Skipped || r.SentAt.IsZero() {
		t.Errorf("order still ahead: reminder %+v, want sent", r)
	}
	waitClosed(t, f.rec, 1)
	if n := expiringEvents(t, f, overdue.ID); n != 0 {
		t.Errorf("closed order: %d order.expiring, want none", n)
	}
	if n := expiringEvents(t, f, ahead.ID); n != 1 {
		t.Errorf("order still ahead: %d order.expiring, want 1", n)
	}
}
