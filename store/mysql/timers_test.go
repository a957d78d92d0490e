package mysql_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// Timers on MySQL: what is particular to this store (its schema, the
// feed between processes, races between store values, bytes kept as
// given). The conformance suite covers the TimerStore contract itself.

// timerSetup opens a store with the outbox on a fake clock at
// hourglasstest.Epoch; it returns the store, its clock and its database's URL.
func timerSetup(t *testing.T) (*mysql.Store, *hourglasstest.Clock, string) {
	t.Helper()
	url := mytest.NewDatabase(t)
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	return open(t, url, clock, true), clock, url
}

func arm(t *testing.T, s *mysql.Store, p hourglass.ArmTimerParams) (hourglass.Timer, bool) {
	t.Helper()
	tm, created, err := s.ArmTimer(context.Background(), p)
	if err != nil {
		t.Fatalf("ArmTimer(%s): %v", p.Key, err)
	}
	return tm, created
}

// TestTimerIDsStartAtBase: the timers table's AUTO_INCREMENT makes the
// first timer's id exactly TimerIDBase.
func TestTimerIDsStartAtBase(t *testing.T) {
	t.Parallel()
	s, _, _ := timerSetup(t)
	a, created := arm(t, s, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute})
	if !created || a.ID != hourglass.TimerIDBase {
		t.Fatalf("first timer: id %d, created %v; want %d, true", a.ID, created, hourglass.TimerIDBase)
	}
	if b, _ := arm(t, s, hourglass.ArmTimerParams{Key: "b", Delay: time.Minute}); b.ID <= a.ID {
		t.Fatalf("second timer's id %d is not above the first's %d", b.ID, a.ID)
	}
}

// TestTimerFeed: another process's watch learns of an armed timer (and of
// a re-arm) through the order feed; AnnounceWithin leaves a far one out.
func TestTimerFeed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := mytest.NewDatabase(t)
	a, err := mysql.Open(ctx, mysql.Config{URL: url, AnnounceWithin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b := open(t, url, nil, false)
	reports := make(chan []hourglass.DueItem, 100)
	done := make(chan error, 1)
	go func() { done <- b.WatchCreated(ctx, func(ts []hourglass.DueItem) { reports <- ts }) }()
	t.Cleanup(func() { cancel(); <-done })
	next := func() []hourglass.DueItem {
		t.Helper()
		select {
		case ts := <-reports:
			return ts
		case <-time.After(10 * time.Second):
			t.Fatal("no report within 10s")
			return nil
		}
	}
	if got := next(); got != nil {
		t.Fatalf("first report %v, want nil (reload)", got)
	}
	far, _ := arm(t, a, hourglass.ArmTimerParams{Key: "far", Delay: 2 * time.Hour})
	near, _ := arm(t, a, hourglass.ArmTimerParams{Key: "near", Delay: time.Minute})
	if got := next(); len(got) != 1 || got[0].ID != near.ID || !got[0].At.Equal(near.FireAt) {
		t.Fatalf("reported %v, want only %d at %v (%d is beyond AnnounceWithin)", got, near.ID, near.FireAt, far.ID)
	}
	again, _ := arm(t, a, hourglass.ArmTimerParams{Key: "far", Delay: time.Second, RequestHash: []byte("x")})
	if got := next(); len(got) != 1 || got[0].ID != far.ID || !got[0].At.Equal(again.FireAt) {
		t.Fatalf("reported %v, want the re-armed %d at %v", got, far.ID, again.FireAt)
	}
	// An arming that changes nothing announces nothing.
	arm(t, a, hourglass.ArmTimerParams{Key: "far", Delay: time.Second, RequestHash: []byte("x")})
	select {
	case got := <-reports:
		t.Fatalf("reported %v after a repeated arming", got)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestTimerConcurrentFires: two store values firing the same timers at
// once fire each exactly once, with one event each.
func TestTimerConcurrentFires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := mytest.NewDatabase(t)
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	a, b := open(t, url, clock, false), open(t, url, clock, false)
	var ids []int64
	for i := range 20 {
		tm, _ := arm(t, a, hourglass.ArmTimerParams{Key: fmt.Sprintf("t%02d", i), Delay: time.Second})
		ids = append(ids, tm.ID)
	}
	clock.Advance(time.Second)
	fired := make(chan int, 2)
	var wg sync.WaitGroup
	for _, s := range []*mysql.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i, id := range ids { // pairs from both ends: the two lock in id order
				got, err := s.FireTimers(ctx, []int64{id, ids[len(ids)-1-i]})
				if err != nil {
					t.Error(err)
				}
				n += len(got)
			}
			fired <- n
		}()
	}
	wg.Wait()
	if n := <-fired + <-fired; n != len(ids) {
		t.Fatalf("%d fires reported, want %d", n, len(ids))
	}
	for _, id := range ids {
		if evs, err := b.OrderEvents(ctx, id); err != nil || len(evs) != 1 {
			t.Fatalf("timer %d: events %v, %v; want one", id, evs, err)
		}
	}
}

// TestTimerBytesAsGiven: a payload is kept byte for byte (spacing,
// non-ASCII characters, number forms), in the timer, its event and its
// delivery.
func TestTimerBytesAsGiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock, _ := timerSetup(t)
	w, err := s.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://hooks.example.com/x", Events: []hourglass.EventType{hourglass.EventTimerFired}, Secret: "0123456789abcdef"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	payload := json.RawMessage("{\"b\": \"ü€😀\",\n \"a\": [1, 2.50]}")
	if err := (hourglass.ArmTimerParams{Key: "a", Payload: payload}).Validate(); err != nil {
		t.Fatalf("the payload is not valid for hourglass: %v", err)
	}
	tm, _ := arm(t, s, hourglass.ArmTimerParams{Key: "a", Payload: payload})
	got, err := s.Timer(ctx, "a")
	if err != nil || !bytes.Equal(got.Payload, payload) || !bytes.Equal(tm.Payload, payload) {
		t.Fatalf("payload %q (%v), armed %q; want %q", got.Payload, err, tm.Payload, payload)
	}
	fired, err := s.FireTimers(ctx, []int64{tm.ID})
	if err != nil || len(fired) != 1 {
		t.Fatalf("fire: %v, %v", fired, err)
	}
	evs, err := s.OrderEvents(ctx, tm.ID)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %v, %v", evs, err)
	}
	firedTimer := got
	firedTimer.Status, firedTimer.FiredAt, firedTimer.UpdatedAt = hourglass.TimerFired, clock.Now().Truncate(time.Millisecond), clock.Now().Truncate(time.Millisecond)
	if want := hourglass.MarshalTimerEvent(evs[0].ID, firedTimer); !bytes.Equal(evs[0].Body, want) {
		t.Fatalf("event body\n%q\nwant\n%q", evs[0].Body, want)
	}
	due, err := s.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: clock.Now(), Limit: 10})
	if err != nil || len(due) != 1 {
		t.Fatalf("due deliveries %v, %v", due, err)
	}
	d, err := s.PendingDelivery(ctx, due[0].ID)
	if err != nil || d.WebhookID != w.ID || d.OrderID != tm.ID || !bytes.Equal(d.Body, evs[0].Body) {
		t.Fatalf("delivery %+v, %v; want webhook %d, timer %d, the event's body", d, err, w.ID, tm.ID)
	}
}
