package hourglasstest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimers covers hourglass.TimerStore: ArmTimer, Timer, Timers,
// CancelTimer, FireTimers, TimersDue and TimerCounts, what a fire writes
// (one timer.fired event and its webhook deliveries) and what an arming
// writes (the outbox, the created feed between nodes). Timer ids share the
// columns that carry an order id, so the cases also check that orders and
// timers never leak into each other's scans. Skipped for stores that do not
// implement hourglass.TimerStore yet.
func exerciseTimers(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) timerFixture { return withTimers(t, setupStore(t, h)) }

	exerciseTimersArm(t, setup)
	exerciseTimersRead(t, setup)
	exerciseTimerLists(t, setup)
	exerciseTimersFire(t, setup)
	exerciseTimersDue(t, setup)
	exerciseTimersOutbox(t, h)
	exerciseTimersShared(t, h)
}

// timerFixture is a storeFixture with its database's hourglass.TimerStore.
type timerFixture struct {
	storeFixture
	ts hourglass.TimerStore
}

// withTimers returns f with its database's TimerStore; it skips t when the
// store does not implement one.
func withTimers(t *testing.T, f storeFixture) timerFixture {
	t.Helper()
	return timerFixture{storeFixture: f, ts: f.db}
}

// arm arms a timer and returns it and whether it was created.
func (f timerFixture) arm(t *testing.T, p hourglass.ArmTimerParams) (hourglass.Timer, bool) {
	t.Helper()
	tm, created, err := f.ts.ArmTimer(f.ctx, p)
	if err != nil {
		t.Fatalf("ArmTimer(%s): %v", p.Key, err)
	}
	if tm.Key != p.Key || tm.Status != hourglass.TimerScheduled {
		t.Fatalf("ArmTimer(%s) = %+v; want the key, scheduled", p.Key, tm)
	}
	return tm, created
}

func (f timerFixture) timer(t *testing.T, key string) hourglass.Timer {
	t.Helper()
	tm, err := f.ts.Timer(f.ctx, key)
	if err != nil {
		t.Fatalf("Timer(%s): %v", key, err)
	}
	return tm
}

func (f timerFixture) timers(t *testing.T, filter hourglass.TimerFilter) []hourglass.Timer {
	t.Helper()
	ts, err := f.ts.Timers(f.ctx, filter)
	if err != nil {
		t.Fatalf("Timers(%+v): %v", filter, err)
	}
	return ts
}

func (f timerFixture) cancel(t *testing.T, key string) hourglass.Timer {
	t.Helper()
	tm, err := f.ts.CancelTimer(f.ctx, key)
	if err != nil {
		t.Fatalf("CancelTimer(%s): %v", key, err)
	}
	return tm
}

func (f timerFixture) fire(t *testing.T, ids ...int64) []hourglass.FiredTimer {
	t.Helper()
	fired, err := f.ts.FireTimers(f.ctx, ids)
	if err != nil {
		t.Fatalf("FireTimers(%v): %v", ids, err)
	}
	return fired
}

// timersDue returns every timer due at or before until, in one page.
func (f timerFixture) timersDue(t *testing.T, until time.Time) []hourglass.DueItem {
	t.Helper()
	ts, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: until, Limit: 10000})
	if err != nil {
		t.Fatalf("TimersDue(until %v): %v", until, err)
	}
	return ts
}

func (f timerFixture) timerCounts(t *testing.T) map[hourglass.TimerStatus]int64 {
	t.Helper()
	got, err := f.ts.TimerCounts(f.ctx)
	if err != nil {
		t.Fatalf("TimerCounts: %v", err)
	}
	return got
}

func timerCountsOf(scheduled, fired, cancelled int64) map[hourglass.TimerStatus]int64 {
	return map[hourglass.TimerStatus]int64{hourglass.TimerScheduled: scheduled, hourglass.TimerFired: fired, hourglass.TimerCancelled: cancelled}
}

// sameTimer reports whether two timers have the same id and fields,
// times to the millisecond and payloads compared as compact JSON (as
// hourglass.MarshalTimer writes them).
func sameTimer(a, b hourglass.Timer) bool {
	ja, jb := hourglass.MarshalTimer(a), hourglass.MarshalTimer(b)
	return a.ID == b.ID && a.Status == b.Status && ja != nil && string(ja) == string(jb)
}

func sameFiredTimer(a, b hourglass.FiredTimer) bool {
	return a.ID == b.ID && a.Key == b.Key && a.FireAt.Equal(b.FireAt) && a.FiredAt.Equal(b.FiredAt)
}

// compactJSON returns raw without insignificant space.
func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("payload %q is not JSON: %v", raw, err)
	}
	return b.String()
}

func timerKeys(ts []hourglass.Timer) []string {
	var out []string
	for _, tm := range ts {
		out = append(out, tm.Key)
	}
	return out
}
