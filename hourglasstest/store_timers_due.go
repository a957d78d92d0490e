package hourglasstest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimersDue covers TimersDue: which timers are due, in what order,
// for which partitions, and that orders and timers never leak into each
// other's scans.
func exerciseTimersDue(t *testing.T, setup func(*testing.T) timerFixture) {
	t.Run("TimersDue", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 100)
		until := Epoch.Add(4 * time.Second) // excludes the 5 s ones
		var want []hourglass.DueItem
		for i := range 30 {
			key := fmt.Sprintf("t%02d", i)
			switch i % 7 {
			case 3:
				f.arm(t, hourglass.ArmTimerParams{Key: key, Delay: time.Second, RequestHash: []byte("h")})
				f.cancel(t, key)
				continue
			case 5:
				tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: key, RequestHash: []byte("h")}) // due now
				if fired := f.fire(t, tm.ID); len(fired) != 1 {
					t.Fatalf("fire %s = %+v", key, fired)
				}
				continue
			}
			// Fire times repeat every 5 timers, so paging must break ties by id.
			tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: key, Delay: time.Duration(1+i%5) * time.Second, RequestHash: []byte("h")})
			if !tm.FireAt.After(until) {
				want = append(want, hourglass.DueItem{ID: tm.ID, At: tm.FireAt})
			}
		}
		var orders []int64
		for range 3 {
			orders = append(orders, f.create(t, time.Second, item("A", 1)).ID)
		}
		slices.SortFunc(want, func(a, b hourglass.DueItem) int {
			if timerBefore(a.At, a.ID, b.At, b.ID) {
				return -1
			}
			return 1
		})
		for _, limit := range []int{1, 4, 5, 100} {
			var got []hourglass.DueItem
			p := hourglass.PendingDueParams{Until: until, Limit: limit}
			for n := 0; ; n++ {
				if n > maxPages {
					t.Fatalf("TimersDue paging does not end: the cursor does not advance")
				}
				page, err := f.ts.TimersDue(f.ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("limit %d: a page of %d", limit, len(page))
				}
				got = append(got, page...)
				if len(page) < limit {
					break
				}
				p.After, p.AfterID = page[len(page)-1].At, page[len(page)-1].ID
			}
			if !sameTimers(got, want) {
				t.Errorf("limit %d: paged\n%v\nwant\n%v", limit, got, want)
			}
		}
		// A cursor inside a group of equal times continues by id.
		page, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{After: want[2].At, AfterID: want[2].ID, Until: until, Limit: 2})
		if err != nil || !sameTimers(page, want[3:5]) {
			t.Fatalf("after %v: %v, %v; want %v", want[2], page, err, want[3:5])
		}
		// Orders and timers stay apart.
		pending, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: farFuture, Limit: 1000})
		if err != nil || !slices.Equal(timerIDs(pending), orders) {
			t.Fatalf("PendingDue = %v, %v; want only the orders %v", pending, err, orders)
		}
		// A fired timer is no longer due.
		f.clock.Set(until)
		f.fire(t, want[0].ID)
		if page, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: until, Limit: 1}); err != nil || !sameTimers(page, want[1:2]) {
			t.Fatalf("after firing the first: %v, %v; want %v", page, err, want[1])
		}
		if page, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: Epoch, Limit: 10}); err != nil || len(page) != 0 {
			t.Fatalf("until before every fire time: %v, %v", page, err)
		}
	})

	t.Run("TimersDueParts", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		var timers []hourglass.Timer
		for i := range 2*hourglass.Partitions + 3 { // every partition, some twice
			tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("p", i), Delay: time.Second, RequestHash: []byte("h")})
			timers = append(timers, tm)
		}
		f.clock.Advance(time.Minute)
		for _, parts := range []hourglass.Parts{nil, {}, {0}, {hourglass.Partitions - 1}, {1, 5, 63}, {0, 2, 4, 6, 8, 10, 12, 14, 16, 31, 32, 33, 62}} {
			var want []int64
			for _, tm := range timers {
				if parts.Has(tm.ID) {
					want = append(want, tm.ID)
				}
			}
			got, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: f.clock.Now(), Limit: 10000, Parts: parts})
			if err != nil {
				t.Fatalf("TimersDue(parts %v): %v", parts, err)
			}
			if ids := timerIDs(got); !slices.Equal(ids, want) {
				t.Errorf("TimersDue(parts %v) = timers %v, want %v", parts, ids, want)
			}
		}
	})
}
