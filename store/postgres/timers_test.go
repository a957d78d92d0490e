package postgres

// What the shared suite (hourglasstest's Timers area) cannot see on
// PostgreSQL: an armed timer's announcement on the created-orders channel
// with AnnounceWithin (measured from the arming), and a payload the text
// column's encoding would refuse.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func arm(t *testing.T, s *Store, p hourglass.ArmTimerParams) (hourglass.Timer, bool) {
	t.Helper()
	tm, created, err := s.ArmTimer(context.Background(), p)
	if err != nil {
		t.Fatalf("arm %q: %v", p.Key, err)
	}
	return tm, created
}

// TestArmTimerAnnounced: another store value's WatchCreated receives an
// armed timer (id and fire time) when it fires within AnnounceWithin of the
// arming, a re-arm that changed it again, and neither a timer due later
// nor a repeat of an arm (same request hash).
func TestArmTimerAnnounced(t *testing.T) {
	t.Parallel()
	url, a, _ := setupShared(t)
	b, err := Open(context.Background(), Config{URL: url, MaxConns: 4, AnnounceWithin: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	calls := watch(t, a)
	next := func(what string) []hourglass.DueItem {
		t.Helper()
		select {
		case ts := <-calls:
			return ts
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was not announced", what)
			return nil
		}
	}
	arm(t, b, hourglass.ArmTimerParams{Key: "late", Delay: time.Hour, RequestHash: []byte("1")})
	soon, created := arm(t, b, hourglass.ArmTimerParams{Key: "soon", Delay: 30 * time.Second, RequestHash: []byte("1")})
	if !created || !hourglass.IsTimerID(soon.ID) {
		t.Fatalf("arm = %+v, created %v; want a new timer with an id from TimerIDBase", soon, created)
	}
	if ts := next("the timer due within the minute"); len(ts) != 1 || ts[0].ID != soon.ID || !ts[0].At.Equal(soon.FireAt) {
		t.Fatalf("announced %v, want only timer %d at %v", ts, soon.ID, soon.FireAt)
	}
	if again, created := arm(t, b, hourglass.ArmTimerParams{Key: "soon", Delay: 30 * time.Second, RequestHash: []byte("1")}); created || !again.UpdatedAt.Equal(soon.UpdatedAt) {
		t.Fatalf("repeated arm = %+v, created %v; want the timer unchanged", again, created)
	}
	// The late timer re-armed to fire soon is announced now.
	late, _ := arm(t, b, hourglass.ArmTimerParams{Key: "late", Delay: time.Second, RequestHash: []byte("2")})
	if ts := next("the re-armed timer"); len(ts) != 1 || ts[0].ID != late.ID || !ts[0].At.Equal(late.FireAt) {
		t.Fatalf("announced %v, want only timer %d at %v", ts, late.ID, late.FireAt)
	}
	select {
	case ts := <-calls:
		t.Fatalf("announced %v, want nothing more", ts)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestTimerWritesInOneBatch runs timer writes as one group commit (the
// writer's commit, called directly, so the batch is exactly these writes):
// a key armed three times (created once, then unchanged by a repeat, then
// re-armed), a refused arm beside good ones (it fails alone, and the same
// key's next arm of the batch creates the timer), an unchanged arm of a
// timer armed before the batch, cancels after the arms, and two fires
// listing the same timer (reported once). The batch announces the timers
// it changed in one notification, each once, with its last fire time.
func TestTimerWritesInOneBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, a, b := setupShared(t)
	calls := watch(t, a)
	before, _ := arm(t, b, hourglass.ArmTimerParams{Key: "before", Delay: time.Hour, RequestHash: []byte("1")})
	due, _ := arm(t, b, hourglass.ArmTimerParams{Key: "due", RequestHash: []byte("1")})
	// The two arms' announcements. A reload (nil) says the listener
	// (re)connected after them and they may be lost: a probe's
	// announcement then shows it listens before the batch.
	pending := map[int64]bool{before.ID: true, due.ID: true}
	for probes := 0; len(pending) > 0; {
		select {
		case ts := <-calls:
			if ts == nil {
				probes++
				if probes > 3 {
					t.Fatal("the listener reconnected three times before the batch")
				}
				p, _ := arm(t, b, hourglass.ArmTimerParams{Key: fmt.Sprint("probe", probes), Delay: time.Hour, RequestHash: []byte("1")})
				pending = map[int64]bool{p.ID: true}
			}
			for _, tm := range ts {
				delete(pending, tm.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the arms before the batch were not announced: %v still missing", pending)
		}
	}
	armOp := func(key string, delay time.Duration, hash string, webhook int64) *op {
		return &op{kind: opArmTimer, arm: newArmArgs(hourglass.ArmTimerParams{Key: key, Delay: delay, RequestHash: []byte(hash), WebhookID: webhook})}
	}
	var (
		a1       = armOp("a", time.Minute, "1", 0)
		a2       = armOp("a", time.Minute, "1", 0) // a repeat of a1
		a3       = armOp("a", 2*time.Minute, "2", 0)
		refused  = armOp("b", time.Minute, "1", 999999)
		b2       = armOp("b", time.Minute, "1", 0)
		c        = armOp("c", time.Minute, "1", 0)
		repeat   = armOp("before", time.Hour, "1", 0)
		cancelC  = &op{kind: opCancelTimer, key: "c"}
		cancelNo = &op{kind: opCancelTimer, key: "none"}
		fire1    = &op{kind: opFireTimers, ids: []int64{due.ID}}
		fire2    = &op{kind: opFireTimers, ids: []int64{due.ID, before.ID}}
	)
	batch := []*op{a1, a2, fire1, a3, refused, cancelC, b2, c, repeat, cancelNo, fire2}
	b.w.Commit(ctx, batch)

	for _, tt := range []struct {
		name    string
		o       *op
		created bool
		key     string
		status  hourglass.TimerStatus
	}{
		{"first arm of a", a1, true, "a", hourglass.TimerScheduled},
		{"repeat of a", a2, false, "a", hourglass.TimerScheduled},
		{"re-arm of a", a3, false, "a", hourglass.TimerScheduled},
		{"arm of b after a refused one", b2, true, "b", hourglass.TimerScheduled},
		{"arm of c", c, true, "c", hourglass.TimerScheduled},
		{"repeat of an earlier arm", repeat, false, "before", hourglass.TimerScheduled},
		{"cancel of c", cancelC, false, "c", hourglass.TimerCancelled},
	} {
		if tt.o.err != nil || tt.o.created != tt.created || tt.o.timer.Key != tt.key || tt.o.timer.Status != tt.status {
			t.Errorf("%s: %+v created %v err %v; want %s %s, created %v", tt.name, tt.o.timer, tt.o.created, tt.o.err, tt.key, tt.status, tt.created)
		}
	}
	if !a2.timer.UpdatedAt.Equal(a1.timer.UpdatedAt) || a2.timer.ID != a1.timer.ID || !a3.timer.FireAt.After(a1.timer.FireAt) {
		t.Errorf("a: armed %+v, repeated %+v, re-armed %+v", a1.timer, a2.timer, a3.timer)
	}
	if repeat.timer.ID != before.ID || !repeat.timer.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("repeat of an earlier arm = %+v, want it as armed: %+v", repeat.timer, before)
	}
	if hourglass.ErrorCode(refused.err) != hourglass.CodeInvalidArgument || !strings.Contains(hourglass.ErrorMessage(refused.err), "999999") {
		t.Errorf("arm with an unknown webhook: %v, want invalid_argument naming it", refused.err)
	}
	if hourglass.ErrorCode(cancelNo.err) != hourglass.CodeNotFound {
		t.Errorf("cancel of no timer: %v, want not_found", cancelNo.err)
	}
	if len(fire1.fired) != 1 || fire1.fired[0].ID != due.ID || len(fire2.fired) != 0 || fire1.err != nil || fire2.err != nil {
		t.Errorf("fires = %+v (%v) and %+v (%v); want the due timer reported by the first only", fire1.fired, fire1.err, fire2.fired, fire2.err)
	}
	for _, o := range []*op{a3, b2, cancelC} {
		if got, err := b.Timer(ctx, o.timer.Key); err != nil || got.Status != o.timer.Status || !got.FireAt.Equal(o.timer.FireAt) || !got.UpdatedAt.Equal(o.timer.UpdatedAt) {
			t.Errorf("Timer(%q) = %+v, %v; the batch returned %+v", o.timer.Key, got, err, o.timer)
		}
	}
	select {
	case ts := <-calls:
		// c was armed and then cancelled by cancelC in the batch: the watch
		// reads the announced ids' deadlines from the database (a notice is
		// only a hint), where c is no longer scheduled.
		want := map[int64]time.Time{a3.timer.ID: a3.timer.FireAt, b2.timer.ID: b2.timer.FireAt}
		got := map[int64]time.Time{}
		for _, tm := range ts {
			got[tm.ID] = tm.At
		}
		if len(ts) != len(want) || len(got) != len(want) {
			t.Fatalf("announced %v, want %v", ts, want)
		}
		for id, at := range want {
			if !got[id].Equal(at) {
				t.Fatalf("announced %v, want %v", ts, want)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the batch's arms were not announced")
	}
	select {
	case ts := <-calls:
		t.Fatalf("announced %v too, want one notification", ts)
	case <-time.After(300 * time.Millisecond):
	}
}
