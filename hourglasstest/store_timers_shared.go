package hourglasstest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimersShared covers two store values on one database: concurrent
// arms of one key create one timer, and a timer armed on one fires from the
// other. Skipped when h.OpenShared is nil.
func exerciseTimersShared(t *testing.T, h StoreHarness) {
	t.Run("Shared", func(t *testing.T) {
		if h.OpenShared == nil {
			t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
		}
		t.Parallel()
		setup := func(t *testing.T) (a, b timerFixture) {
			t.Helper()
			clock := NewClock(Epoch)
			da, db := h.OpenShared(t, StoreOptions{Clock: clock})
			fa := storeFixture{ctx: context.Background(), db: da, clock: clock}
			return withTimers(t, fa), withTimers(t, fa.on(db))
		}

		t.Run("ConcurrentArmsCreateOne", func(t *testing.T) {
			t.Parallel()
			a, b := setup(t)
			for round, sameHash := range []bool{true, false} {
				key := fmt.Sprint("k-", sameHash)
				const goroutines = 16 // 8 on each store value
				var (
					created atomic.Int64
					mu      sync.Mutex
					got     []hourglass.Timer
					wg      sync.WaitGroup
				)
				for g := range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						f := []timerFixture{a, b}[g%2]
						p := hourglass.ArmTimerParams{Key: key, Delay: time.Minute, Payload: json.RawMessage(`{"g":1}`), RequestHash: []byte("h")}
						if !sameHash {
							p.Payload, p.RequestHash = json.RawMessage(fmt.Sprintf(`{"g":%d}`, g)), []byte(fmt.Sprint("h", g))
						}
						tm, c, err := f.ts.ArmTimer(f.ctx, p)
						if err != nil {
							t.Errorf("ArmTimer: %v", err)
							return
						}
						if c {
							created.Add(1)
						}
						mu.Lock()
						got = append(got, tm)
						mu.Unlock()
					}()
				}
				wg.Wait()
				if created.Load() != 1 {
					t.Fatalf("same hash %v: %d of %d concurrent arms of one key created it, want exactly 1", sameHash, created.Load(), goroutines)
				}
				for _, tm := range got {
					if tm.ID != got[0].ID || tm.Status != hourglass.TimerScheduled || sameHash && !sameTimer(tm, got[0]) {
						t.Fatalf("same hash %v: arms returned %+v and %+v", sameHash, got[0], tm)
					}
				}
				for _, f := range []timerFixture{a, b} {
					all := f.timers(t, hourglass.TimerFilter{Limit: 10})
					if len(all) != round+1 || !slices.Contains(timerKeys(all), key) {
						t.Fatalf("same hash %v: timers %v, want one of key %s", sameHash, timerKeys(all), key)
					}
					if stored := f.timer(t, key); stored.ID != got[0].ID {
						t.Fatalf("same hash %v: Timer(%s) = %+v, arms returned id %d", sameHash, key, stored, got[0].ID)
					}
				}
			}
		})

		t.Run("FireFromTheOther", func(t *testing.T) {
			t.Parallel()
			a, b := setup(t)
			tm, _ := b.arm(t, hourglass.ArmTimerParams{Key: "x", Delay: time.Second, RequestHash: []byte("h")})
			if got := a.timer(t, "x"); !sameTimer(got, tm) {
				t.Fatalf("a reads %+v, b armed %+v", got, tm)
			}
			a.clock.Advance(time.Second)
			if due := a.timersDue(t, a.clock.Now()); len(due) != 1 || due[0].ID != tm.ID {
				t.Fatalf("a's TimersDue = %v", due)
			}
			if fired := a.fire(t, tm.ID); len(fired) != 1 {
				t.Fatalf("a fired %+v", fired)
			}
			if got := b.timer(t, "x"); got.Status != hourglass.TimerFired || !got.FiredAt.Equal(a.clock.Now()) {
				t.Fatalf("b reads %+v after a fired it", got)
			}
			if fired := b.fire(t, tm.ID); len(fired) != 0 {
				t.Fatalf("b fired again what a fired: %+v", fired)
			}
			if evs := b.events(t, tm.ID); len(evs) != 1 || evs[0].Type != hourglass.EventTimerFired {
				t.Fatalf("b reads events %v", eventTypes(evs))
			}
			_, err := b.ts.CancelTimer(b.ctx, "x")
			wantCode(t, err, hourglass.CodeTimerFired)
		})
	})
}
