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
	"github.com/hourglass/hourglass/store/internal/batch"
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
// timer armed before the batch, a cancel after its key's arm (decided in
// queue order, store/internal/batch), and two fires listing the same timer
// (reported once). The batch announces the timers
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
	armOp := func(key string, delay time.Duration, hash string, webhook int64) *batch.Op {
		return &batch.Op{Kind: batch.Arm, Arm: hourglass.ArmTimerParams{Key: key, Delay: delay, RequestHash: []byte(hash), WebhookID: webhook}}
	}
	var (
		a1       = armOp("a", time.Minute, "1", 0)
		a2       = armOp("a", time.Minute, "1", 0) // a repeat of a1
		a3       = armOp("a", 2*time.Minute, "2", 0)
		refused  = armOp("b", time.Minute, "1", 999999)
		b2       = armOp("b", time.Minute, "1", 0)
		c        = armOp("c", time.Minute, "1", 0)
		repeat   = armOp("before", time.Hour, "1", 0)
		cancelC  = &batch.Op{Kind: batch.Cancel, Key: "c"}
		cancelNo = &batch.Op{Kind: batch.Cancel, Key: "none"}
		fire1    = &batch.Op{Kind: batch.Fire, IDs: []int64{due.ID}}
		fire2    = &batch.Op{Kind: batch.Fire, IDs: []int64{due.ID, before.ID}}
	)
	ops := []*batch.Op{a1, a2, fire1, a3, refused, b2, c, cancelC, repeat, cancelNo, fire2}
	b.w.Commit(ctx, ops)

	for _, tt := range []struct {
		name    string
		o       *batch.Op
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
		if tt.o.Res.Err != nil || tt.o.Res.Created != tt.created || tt.o.Res.Timer.Key != tt.key || tt.o.Res.Timer.Status != tt.status {
			t.Errorf("%s: %+v created %v err %v; want %s %s, created %v", tt.name, tt.o.Res.Timer, tt.o.Res.Created, tt.o.Res.Err, tt.key, tt.status, tt.created)
		}
	}
	if !a2.Res.Timer.UpdatedAt.Equal(a1.Res.Timer.UpdatedAt) || a2.Res.Timer.ID != a1.Res.Timer.ID || !a3.Res.Timer.FireAt.After(a1.Res.Timer.FireAt) {
		t.Errorf("a: armed %+v, repeated %+v, re-armed %+v", a1.Res.Timer, a2.Res.Timer, a3.Res.Timer)
	}
	if repeat.Res.Timer.ID != before.ID || !repeat.Res.Timer.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("repeat of an earlier arm = %+v, want it as armed: %+v", repeat.Res.Timer, before)
	}
	if hourglass.ErrorCode(refused.Res.Err) != hourglass.CodeInvalidArgument || !strings.Contains(hourglass.ErrorMessage(refused.Res.Err), "999999") {
		t.Errorf("arm with an unknown webhook: %v, want invalid_argument naming it", refused.Res.Err)
	}
	if hourglass.ErrorCode(cancelNo.Res.Err) != hourglass.CodeNotFound {
		t.Errorf("cancel of no timer: %v, want not_found", cancelNo.Res.Err)
	}
	if len(fire1.Res.Fired) != 1 || fire1.Res.Fired[0].ID != due.ID || len(fire2.Res.Fired) != 0 || fire1.Res.Err != nil || fire2.Res.Err != nil {
		t.Errorf("fires = %+v (%v) and %+v (%v); want the due timer reported by the first only", fire1.Res.Fired, fire1.Res.Err, fire2.Res.Fired, fire2.Res.Err)
	}
	for _, o := range []*batch.Op{a3, b2, cancelC} {
		if got, err := b.Timer(ctx, o.Res.Timer.Key); err != nil || got.Status != o.Res.Timer.Status || !got.FireAt.Equal(o.Res.Timer.FireAt) || !got.UpdatedAt.Equal(o.Res.Timer.UpdatedAt) {
			t.Errorf("Timer(%q) = %+v, %v; the batch returned %+v", o.Res.Timer.Key, got, err, o.Res.Timer)
		}
	}
	select {
	case ts := <-calls:
		// c was armed and then cancelled by cancelC in the batch: the watch
		// reads the announced ids' deadlines from the database (a notice is
		// only a hint), where c is no longer scheduled.
		want := map[int64]time.Time{a3.Res.Timer.ID: a3.Res.Timer.FireAt, b2.Res.Timer.ID: b2.Res.Timer.FireAt}
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
