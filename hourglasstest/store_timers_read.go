package hourglasstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimersRead covers CancelTimer and the reads: Timer, Timers and
// TimerCounts.
func exerciseTimersRead(t *testing.T, setup func(*testing.T) timerFixture) {
	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		s, _ := f.arm(t, hourglass.ArmTimerParams{Key: "s", Delay: time.Minute, Payload: json.RawMessage(`{"a":1}`), RequestHash: []byte("h")})
		f.clock.Advance(time.Second)
		got := f.cancel(t, "s")
		want := s
		want.Status, want.UpdatedAt = hourglass.TimerCancelled, f.clock.Now()
		if !sameTimer(got, want) {
			t.Fatalf("CancelTimer = %+v, want %+v", got, want)
		}
		f.clock.Advance(time.Second)
		if again := f.cancel(t, "s"); !sameTimer(again, want) {
			t.Fatalf("CancelTimer again = %+v, want %+v unchanged", again, want)
		}
		if stored := f.timer(t, "s"); !sameTimer(stored, want) {
			t.Fatalf("Timer after cancels = %+v, want %+v", stored, want)
		}
		fired, _ := f.arm(t, hourglass.ArmTimerParams{Key: "f", Delay: time.Second, RequestHash: []byte("h")})
		f.clock.Advance(time.Second)
		f.fire(t, fired.ID)
		before := f.timer(t, "f")
		_, err := f.ts.CancelTimer(f.ctx, "f")
		if !errors.Is(err, hourglass.ErrTimerFired) {
			t.Fatalf("CancelTimer(fired) = %v, want ErrTimerFired", err)
		}
		wantCode(t, err, hourglass.CodeTimerFired)
		if after := f.timer(t, "f"); !sameTimer(after, before) || after.Status != hourglass.TimerFired {
			t.Fatalf("a refused cancel changed the timer: %+v, was %+v", after, before)
		}
		_, err = f.ts.CancelTimer(f.ctx, "nope")
		wantCode(t, err, hourglass.CodeNotFound)
		// A cancelled timer is neither due nor fired, even long after its time.
		f.clock.Advance(time.Hour)
		if got := f.fire(t, s.ID); len(got) != 0 {
			t.Fatalf("FireTimers fired a cancelled timer: %+v", got)
		}
		if got := f.timersDue(t, farFuture); len(got) != 0 {
			t.Fatalf("TimersDue = %v; want no cancelled or fired timer", got)
		}
		if evs := f.events(t, s.ID); len(evs) != 0 {
			t.Fatalf("a cancelled timer has events %v", eventTypes(evs))
		}
	})

	t.Run("TimerAndTimers", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		_, err := f.ts.Timer(f.ctx, "nope")
		wantCode(t, err, hourglass.CodeNotFound)
		// Bytewise: digits, upper case, '_', lower case; '-' and '.' before ':'.
		keys := []string{"b", "a", "B", "a.2", "a-1", "_z", "0", "a:1", "ab", "Z9"}
		byKey := map[string]hourglass.Timer{}
		for _, k := range keys {
			byKey[k], _ = f.arm(t, hourglass.ArmTimerParams{Key: k, Delay: time.Second, RequestHash: []byte(k)})
		}
		status := map[string]hourglass.TimerStatus{}
		for _, k := range keys {
			status[k] = hourglass.TimerScheduled
		}
		for _, k := range []string{keys[1], keys[4]} {
			f.cancel(t, k)
			status[k] = hourglass.TimerCancelled
		}
		f.clock.Advance(time.Second)
		for _, k := range []string{keys[2], keys[5], keys[7]} {
			f.fire(t, byKey[k].ID)
			status[k] = hourglass.TimerFired
		}
		sorted := slices.Sorted(maps.Keys(byKey))
		all := f.timers(t, hourglass.TimerFilter{Limit: 100})
		if got := timerKeys(all); !slices.Equal(got, sorted) {
			t.Fatalf("Timers = %v, want by key bytewise %v", got, sorted)
		}
		for _, tm := range all {
			if stored := f.timer(t, tm.Key); !sameTimer(tm, stored) || tm.Status != status[tm.Key] {
				t.Errorf("listed %+v, Timer says %+v, want status %s", tm, stored, status[tm.Key])
			}
		}
		for _, st := range []hourglass.TimerStatus{"", hourglass.TimerScheduled, hourglass.TimerFired, hourglass.TimerCancelled} {
			var want []string
			for _, k := range sorted {
				if st == "" || status[k] == st {
					want = append(want, k)
				}
			}
			if got := timerKeys(f.timers(t, hourglass.TimerFilter{Status: st, Limit: 100})); !slices.Equal(got, want) {
				t.Errorf("status %q: %v, want %v", st, got, want)
			}
			var got []string
			for after, n := "", 0; ; n++ {
				if n > maxPages {
					t.Fatalf("Timers paging does not end: the cursor does not advance")
				}
				page := f.timers(t, hourglass.TimerFilter{Status: st, After: after, Limit: 3})
				if len(page) > 3 {
					t.Fatalf("limit 3 returned %d", len(page))
				}
				got = append(got, timerKeys(page)...)
				if len(page) < 3 {
					break
				}
				after = page[len(page)-1].Key
			}
			if !slices.Equal(got, want) {
				t.Errorf("status %q paged by 3: %v, want %v", st, got, want)
			}
		}
		if got := timerKeys(f.timers(t, hourglass.TimerFilter{After: "a", Limit: 2})); !slices.Equal(got, []string{"a-1", "a.2"}) {
			t.Errorf("after \"a\", limit 2: %v, want [a-1 a.2]", got)
		}
		if got := f.timers(t, hourglass.TimerFilter{After: "b", Limit: 10}); len(got) != 0 {
			t.Errorf("after the last key: %v", timerKeys(got))
		}
	})

	t.Run("Counts", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(0, 0, 0)) {
			t.Fatalf("TimerCounts of an empty database = %v, want every status at 0", got)
		}
		var ids []int64
		for i := range 5 {
			tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("k", i), Delay: time.Second, RequestHash: []byte("h")})
			ids = append(ids, tm.ID)
		}
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(5, 0, 0)) {
			t.Fatalf("TimerCounts after 5 arms = %v", got)
		}
		f.cancel(t, "k0")
		f.clock.Advance(time.Second)
		f.fire(t, ids[1], ids[2], ids[0])
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(2, 2, 1)) {
			t.Fatalf("TimerCounts after a cancel and 2 fires = %v, want 2 scheduled, 2 fired, 1 cancelled", got)
		}
		f.arm(t, hourglass.ArmTimerParams{Key: "k1", Delay: time.Second, RequestHash: []byte("h")})
		f.arm(t, hourglass.ArmTimerParams{Key: "k0", Delay: time.Second, RequestHash: []byte("h")})
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(4, 1, 0)) {
			t.Fatalf("TimerCounts after re-arming a fired and a cancelled timer = %v, want 4 scheduled, 1 fired", got)
		}
	})
}
