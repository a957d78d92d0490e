package hourglasstest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimerLists covers Timers' filters (GET /v1/timers): status,
// prefix and the fire range, alone and combined, their bounds ([From,
// Before), to the millisecond and below it), the order each sorts in, and
// paging across pages with each cursor.
func exerciseTimerLists(t *testing.T, setup func(*testing.T) timerFixture) {
	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		// 30 timers under three prefixes (and keys that share a prefix's
		// start but not its separator), firing on ties across prefixes;
		// every third cancelled, every fifth fired.
		var keys []string
		for i := range 30 {
			key := fmt.Sprintf("%s%02d", []string{"coupon:", "coupon-", "seat:", "coupon:spring:", "c"}[i%5], i)
			keys = append(keys, key)
			f.arm(t, hourglass.ArmTimerParams{Key: key, Delay: time.Duration(10+i%7) * time.Second, RequestHash: []byte(key)})
			f.clock.Advance(time.Second)
		}
		for i, k := range keys {
			if i%3 == 0 {
				f.cancel(t, k)
			}
		}
		f.clock.Set(Epoch.Add(20 * time.Second))
		for i, k := range keys {
			if i%3 != 0 && i%5 == 0 {
				if tm := f.timer(t, k); !tm.FireAt.After(f.clock.Now()) {
					if got := f.fire(t, tm.ID); len(got) != 1 {
						t.Fatalf("fire %s: %v", k, got)
					}
				}
			}
		}
		var all []hourglass.Timer
		for _, k := range keys {
			all = append(all, f.timer(t, k))
		}
		at := func(d time.Duration) time.Time { return Epoch.Add(d) }
		const s, ms = time.Second, time.Millisecond
		cases := []hourglass.TimerFilter{
			{},
			{Prefix: "coupon:"},
			{Prefix: "coupon"},
			{Prefix: "seat:0"},
			{Prefix: "nothing:"},
			{FireFrom: at(20 * s)},
			{FireBefore: at(20 * s)},
			{FireFrom: at(15 * s), FireBefore: at(30 * s)},
			{FireFrom: at(30 * s), FireBefore: at(15 * s)}, // empty
			{Prefix: "coupon:", FireFrom: at(15 * s), FireBefore: at(30 * s)},
			{Prefix: "coupon:", FireFrom: at(15 * s)},
			{Prefix: "c", FireBefore: at(22 * s)},
			// Bounds: From includes its instant, Before excludes it.
			{FireFrom: at(20 * s), FireBefore: at(20*s + ms)},
			{FireFrom: at(20 * s), FireBefore: at(20 * s)},
			{FireFrom: at(20*s - ms/2), FireBefore: at(20*s + ms/2)},
			{FireFrom: at(20*s + time.Microsecond)},
		}
		for _, c := range slices.Clone(cases) {
			for _, st := range []hourglass.TimerStatus{hourglass.TimerScheduled, hourglass.TimerFired, hourglass.TimerCancelled} {
				c.Status = st
				cases = append(cases, c)
			}
		}
		for _, c := range cases {
			want := referenceTimerList(all, c)
			for _, limit := range []int{100, 1, 2, 3} {
				var got []hourglass.Timer
				page := c
				page.Limit = limit
				for n := 0; ; n++ {
					if n > maxPages {
						t.Fatalf("%+v: paging does not end: the cursor does not advance", c)
					}
					l := f.timers(t, page)
					if len(l) > limit {
						t.Fatalf("%+v: limit %d returned %d", c, limit, len(l))
					}
					got = append(got, l...)
					if len(l) < limit {
						break
					}
					last := l[len(l)-1]
					page.After, page.AfterFireAt, page.AfterID = last.Key, last.FireAt, last.ID
					if !c.ByFireAt() {
						page.AfterFireAt, page.AfterID = time.Time{}, 0
					}
				}
				if !slices.Equal(timerKeys(got), timerKeys(want)) {
					t.Errorf("%s, pages of %d: %v, want %v", describeTimerFilter(c), limit, timerKeys(got), timerKeys(want))
					continue
				}
				for i, tm := range got {
					if !sameTimer(tm, want[i]) {
						t.Errorf("%s: listed %+v, Timer says %+v", describeTimerFilter(c), tm, want[i])
					}
				}
			}
		}
		for _, i := range []int{1, 2, 3, 5, 6, 7, 9} {
			if n := len(referenceTimerList(all, cases[i])); n == 0 || n == len(all) {
				t.Errorf("%s: the reference lists %d of %d timers", describeTimerFilter(cases[i]), n, len(all))
			}
		}
		for _, st := range []hourglass.TimerStatus{hourglass.TimerScheduled, hourglass.TimerFired, hourglass.TimerCancelled} {
			if n := len(referenceTimerList(all, hourglass.TimerFilter{Status: st})); n == 0 {
				t.Errorf("no %s timer to list", st)
			}
		}
	})
}

// referenceTimerList is what Timers must return for f (its cursor and
// limit aside) from all.
func referenceTimerList(all []hourglass.Timer, f hourglass.TimerFilter) []hourglass.Timer {
	var out []hourglass.Timer
	for _, tm := range all {
		if (f.Status == "" || tm.Status == f.Status) && strings.HasPrefix(tm.Key, f.Prefix) &&
			(f.FireFrom.IsZero() || !tm.FireAt.Before(f.FireFrom)) && (f.FireBefore.IsZero() || tm.FireAt.Before(f.FireBefore)) {
			out = append(out, tm)
		}
	}
	slices.SortFunc(out, func(a, b hourglass.Timer) int {
		if f.ByFireAt() {
			return cmp.Or(a.FireAt.Compare(b.FireAt), cmp.Compare(a.ID, b.ID))
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

func describeTimerFilter(f hourglass.TimerFilter) string {
	since := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(Epoch).String()
	}
	return fmt.Sprintf("status=%q prefix=%q fire=[%s,%s)", f.Status, f.Prefix, since(f.FireFrom), since(f.FireBefore))
}
