package hourglasstest

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseOrderLists covers ListOrders' filters (GET /v1/orders): status,
// user, deadline and creation ranges, alone and combined, their bounds
// ([From, Before), to the millisecond, and below it), the order each sorts
// in, and paging across pages with the cursor of each order.
func exerciseOrderLists(t *testing.T, h StoreHarness) {
	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 1000)
		// 24 orders of three users, two created each second (pairs share a
		// creation time), with timeouts that make deadlines tie across
		// creation times; each a status by its place.
		timeouts := []time.Duration{10 * time.Second, 20 * time.Second, 5 * time.Second, 12 * time.Second}
		var created, toClose []int64
		for i := range 24 {
			f.clock.Set(Epoch.Add(time.Duration(i/2) * time.Second))
			o, ok, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{
				UserID: fmt.Sprintf("u%d", i%3), Items: []hourglass.Item{item("A", 1)}, Timeout: timeouts[i%4]})
			if err != nil || !ok {
				t.Fatalf("CreateOrder %d: %v", i, err)
			}
			created = append(created, o.ID)
			switch i % 6 {
			case 1:
				f.pay(t, o.ID, fmt.Sprint("p", i))
			case 2:
				f.transition(t, o.ID, hourglass.ActionCancel)
			case 3:
				f.pay(t, o.ID, fmt.Sprint("p", i))
				f.transition(t, o.ID, hourglass.ActionShip)
			case 4:
				toClose = append(toClose, o.ID)
			case 5:
				f.pay(t, o.ID, fmt.Sprint("p", i))
				f.transition(t, o.ID, hourglass.ActionShip)
				f.transition(t, o.ID, hourglass.ActionComplete)
			}
		}
		f.clock.Set(Epoch.Add(time.Minute))
		if got := f.closeOrders(t, toClose...); len(got) != len(toClose) {
			t.Fatalf("closed %d of %d", len(got), len(toClose))
		}
		// Listed at 14 s: the pending orders due by then are closed in the
		// view, the others pending.
		now := Epoch.Add(14 * time.Second)
		var all []hourglass.Order
		for _, id := range created {
			all = append(all, f.order(t, id).View(now))
		}

		at := func(d time.Duration) time.Time { return Epoch.Add(d) }
		const ms = time.Millisecond
		type filter = hourglass.OrderFilter
		cases := []filter{
			{},
			{UserID: "u1"},
			{UserID: "nobody"},
			{DeadlineFrom: at(12 * time.Second)},
			{DeadlineBefore: at(15 * time.Second)},
			{DeadlineFrom: at(12 * time.Second), DeadlineBefore: at(20 * time.Second)},
			{DeadlineFrom: at(20 * time.Second), DeadlineBefore: at(12 * time.Second)}, // empty
			{CreatedFrom: at(3 * time.Second)},
			{CreatedBefore: at(6 * time.Second)},
			{CreatedFrom: at(3 * time.Second), CreatedBefore: at(9 * time.Second)},
			// Both ranges: sorted by deadline, created checked on the way.
			{DeadlineFrom: at(10 * time.Second), CreatedFrom: at(2 * time.Second), CreatedBefore: at(8 * time.Second)},
			{UserID: "u2", DeadlineFrom: at(10 * time.Second)},
			{UserID: "u0", CreatedBefore: at(7 * time.Second)},
			{UserID: "u1", DeadlineBefore: at(25 * time.Second), CreatedFrom: at(1 * time.Second)},
			// Bounds: From includes its instant, Before excludes it, and a
			// bound between two milliseconds falls on the later one.
			{DeadlineFrom: at(15 * time.Second), DeadlineBefore: at(15*time.Second + ms)},
			{DeadlineFrom: at(15 * time.Second), DeadlineBefore: at(15 * time.Second)},
			{DeadlineFrom: at(15*time.Second - ms/2), DeadlineBefore: at(15*time.Second + ms/2)},
			{DeadlineFrom: at(15*time.Second + ms/2)},
			{CreatedFrom: at(5 * time.Second), CreatedBefore: at(5*time.Second + ms)},
			{CreatedFrom: at(5*time.Second - time.Microsecond), CreatedBefore: at(5*time.Second + time.Microsecond)},
		}
		for _, c := range slices.Clone(cases) {
			for _, st := range hourglass.States() {
				c.Status = st
				cases = append(cases, c)
			}
		}
		for _, c := range cases {
			c.Now = now
			want := referenceOrderList(all, c)
			for _, limit := range []int{100, 1, 2, 3} {
				var got []hourglass.Order
				page := c
				page.Limit = limit
				for n := 0; ; n++ {
					if n > maxPages {
						t.Fatalf("%s: paging does not end: the cursor does not advance", describeOrderFilter(c))
					}
					l, err := f.db.ListOrders(f.ctx, page)
					if err != nil {
						t.Fatalf("%s: %v", describeOrderFilter(c), err)
					}
					if len(l) > limit {
						t.Fatalf("%s: limit %d returned %d", describeOrderFilter(c), limit, len(l))
					}
					got = append(got, l...)
					if len(l) < limit {
						break
					}
					last := l[len(l)-1]
					page.After, page.AfterAt = last.ID, c.Sort().SortKey(last)
				}
				if !slices.Equal(ids(got), ids(want)) {
					t.Errorf("%s, pages of %d: %v, want %v", describeOrderFilter(c), limit, ids(got), ids(want))
					continue
				}
				for i, o := range got {
					if !sameOrder(o.View(now), want[i]) {
						t.Errorf("%s: listed %+v, Order says %+v", describeOrderFilter(c), o, want[i])
					}
				}
			}
		}
		// The cases are not vacuous: each range and user picks some orders
		// and leaves others.
		for _, i := range []int{1, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13} {
			c := cases[i]
			c.Now = now
			if n := len(referenceOrderList(all, c)); n == 0 || n == len(all) {
				t.Errorf("%s: the reference lists %d of %d orders", describeOrderFilter(c), n, len(all))
			}
		}
	})
}

// referenceOrderList is what ListOrders must return for f (its cursor and
// limit aside) from all, every order as viewed at f.Now.
func referenceOrderList(all []hourglass.Order, f hourglass.OrderFilter) []hourglass.Order {
	in := func(t, from, before time.Time) bool {
		return (from.IsZero() || !t.Before(from)) && (before.IsZero() || t.Before(before))
	}
	var out []hourglass.Order
	for _, o := range all {
		if (f.Status == "" || o.Status == f.Status) && (f.UserID == "" || o.UserID == f.UserID) &&
			in(o.Deadline, f.DeadlineFrom, f.DeadlineBefore) && in(o.CreatedAt, f.CreatedFrom, f.CreatedBefore) {
			out = append(out, o)
		}
	}
	sort := f.Sort()
	slices.SortFunc(out, func(a, b hourglass.Order) int {
		return cmp.Or(sort.SortKey(a).Compare(sort.SortKey(b)), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func describeOrderFilter(f hourglass.OrderFilter) string {
	s := fmt.Sprintf("status=%q user=%q", f.Status, f.UserID)
	since := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(Epoch).String()
	}
	return s + fmt.Sprintf(" deadline=[%s,%s) created=[%s,%s)", since(f.DeadlineFrom), since(f.DeadlineBefore), since(f.CreatedFrom), since(f.CreatedBefore))
}
