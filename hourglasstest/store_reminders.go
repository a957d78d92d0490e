package hourglasstest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseReminders covers order reminders (issue #41): RemindOrders and
// RemindersDue, the leads of the policy and of a create, and how pay,
// cancel, close and extension change them.
func exerciseReminders(t *testing.T, h StoreHarness) {
	// setup: a policy of 30 s orders reminded 10 s ahead (at 20 s).
	setup := func(t *testing.T) storeFixture {
		f := setupStore(t, h)
		f.product(t, "A", "x", 1000)
		f.product(t, "B", "early", 1000)
		if err := f.db.PutPolicy(f.ctx, hourglass.Policy{DefaultTimeout: 30 * time.Second, RemindBefore: 10 * time.Second,
			RemindCategories: map[string]time.Duration{"early": 25 * time.Second}}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	at := func(d time.Duration) time.Time { return Epoch.Add(d) }
	remind := func(t *testing.T, f storeFixture, ids ...int64) []hourglass.RemindedOrder {
		t.Helper()
		r, err := f.db.RemindOrders(f.ctx, ids)
		if err != nil {
			t.Fatalf("RemindOrders(%v): %v", ids, err)
		}
		return r
	}
	dueReminders := func(t *testing.T, f storeFixture) []hourglass.DueItem {
		t.Helper()
		due, err := f.db.RemindersDue(f.ctx, hourglass.PendingDueParams{Until: farFuture, Limit: 100})
		if err != nil {
			t.Fatalf("RemindersDue: %v", err)
		}
		return due
	}
	// expiring returns the deadline and remind_at each order.expiring
	// event of the order names, checking the rest of its body.
	expiring := func(t *testing.T, f storeFixture, id int64) [][2]string {
		t.Helper()
		var out [][2]string
		for _, e := range f.events(t, id) {
			if e.Type != hourglass.EventOrderExpiring {
				continue
			}
			var body struct {
				ID, Type, CreatedAt string `json:"-"`
				Order               struct {
					ID       int64  `json:"id"`
					Status   string `json:"status"`
					Deadline string `json:"deadline"`
				} `json:"order"`
				Deadline string `json:"deadline"`
				RemindAt string `json:"remind_at"`
			}
			var head map[string]json.RawMessage
			if err := json.Unmarshal(e.Body, &body); err != nil || json.Unmarshal(e.Body, &head) != nil {
				t.Fatalf("order.expiring body %s: %v", e.Body, err)
			}
			if want := []string{"created_at", "deadline", "id", "order", "remind_at", "type"}; !slices.Equal(slices.Sorted(maps.Keys(head)), want) {
				t.Fatalf("order.expiring body %s: keys %v, want %v", e.Body, slices.Sorted(maps.Keys(head)), want)
			}
			if string(head["id"]) != `"`+e.ID+`"` || string(head["type"]) != `"order.expiring"` ||
				body.Order.ID != id || body.Order.Status != string(hourglass.StatePendingPayment) || body.Order.Deadline != body.Deadline {
				t.Fatalf("order.expiring body %s: want id %s, type order.expiring, order %d pending with the body's deadline", e.Body, e.ID, id)
			}
			out = append(out, [2]string{body.Deadline, body.RemindAt})
		}
		return out
	}
	ms := func(d time.Duration) string { return at(d).Format(hourglass.TimeFormat) }
	// sameBodies checks that every reader of an order.expiring event reads
	// the body OrderEvents reads: its pending deliveries (to webhook w)
	// and, where the store keeps histories, its history.
	sameBodies := func(t *testing.T, f storeFixture, w hourglass.Webhook, ids ...int64) {
		t.Helper()
		want := map[string]string{}
		for _, id := range ids {
			for _, e := range f.events(t, id) {
				if e.Type == hourglass.EventOrderExpiring {
					want[e.ID] = string(e.Body)
				}
			}
		}
		delivered := 0
		for _, d := range f.pendingDeliveries(t) {
			if d.WebhookID != w.ID || d.EventType != hourglass.EventOrderExpiring {
				continue
			}
			delivered++
			if string(d.Body) != want[d.EventID] {
				t.Errorf("delivery %d of %s: body %s, want the event's %s", d.ID, d.EventID, d.Body, want[d.EventID])
			}
		}
		if delivered != len(want) {
			t.Errorf("%d order.expiring deliveries, want %d", delivered, len(want))
		}
		hs, ok := f.db.(hourglass.HistoryStore)
		if !ok {
			return
		}
		for _, id := range ids {
			h, err := hs.History(f.ctx, hourglass.HistoryParams{Subject: id})
			if err != nil {
				t.Fatalf("History(%d): %v", id, err)
			}
			for _, e := range h.Events {
				if e.Type == hourglass.EventOrderExpiring && string(e.Body) != want[e.ID] {
					t.Errorf("history of order %d: %s's body %s, want the event's %s", id, e.ID, e.Body, want[e.ID])
				}
			}
		}
	}

	t.Run("SentAtRemindAt", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		w := f.webhook(t, "expiring", hourglass.EventOrderExpiring)
		var (
			mu   sync.Mutex
			seen []hourglass.DueItem
		)
		if feed, ok := f.db.(hourglass.DueFeed); ok {
			ctx, cancel := context.WithCancel(f.ctx)
			wait := feed.WatchDue(ctx, func(u hourglass.DueUpdate) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, u.Due...)
			})
			t.Cleanup(func() { cancel(); wait() })
		}
		o := f.create(t, 0, item("A", 1))
		if !o.RemindAt.Equal(at(20*time.Second)) || o.RemindBefore != 10*time.Second {
			t.Fatalf("created order reminds at %v (lead %s), want 20 s (10 s)", o.RemindAt, o.RemindBefore)
		}
		want := []hourglass.DueItem{{ID: hourglass.ReminderID(o.ID), At: at(20 * time.Second)}}
		if due := dueReminders(t, f); !slices.Equal(due, want) {
			t.Fatalf("RemindersDue = %+v, want %+v", due, want)
		}
		if _, ok := f.db.(hourglass.DueFeed); ok {
			mu.Lock()
			if !slices.Contains(seen, want[0]) {
				t.Errorf("due feed announced %+v; want the reminder %+v", seen, want[0])
			}
			mu.Unlock()
		}
		// Never early: a millisecond before, nothing.
		f.clock.Set(at(20*time.Second - time.Millisecond))
		if r := remind(t, f, o.ID); len(r) != 0 {
			t.Fatalf("RemindOrders before remind_at = %+v, want none", r)
		}
		f.clock.Set(at(20 * time.Second))
		r := remind(t, f, o.ID, o.ID+1000) // an unknown order is left out
		wantR := []hourglass.RemindedOrder{{OrderID: o.ID, RemindAt: at(20 * time.Second), Deadline: at(30 * time.Second), SentAt: at(20 * time.Second)}}
		if !slices.EqualFunc(r, wantR, sameReminded) {
			t.Fatalf("RemindOrders at remind_at = %+v, want %+v", r, wantR)
		}
		// Once: again, nothing; and it is no longer due.
		if r := remind(t, f, o.ID); len(r) != 0 {
			t.Fatalf("RemindOrders again = %+v, want none", r)
		}
		if due := dueReminders(t, f); len(due) != 0 {
			t.Fatalf("RemindersDue after the reminder = %+v, want none", due)
		}
		if got := expiring(t, f, o.ID); !slices.Equal(got, [][2]string{{ms(30 * time.Second), ms(20 * time.Second)}}) {
			t.Fatalf("order.expiring events %v, want one naming deadline 30 s, remind_at 20 s", got)
		}
		// Delivered like every event, to the webhook subscribed to it.
		ds := f.pendingDeliveries(t)
		if len(ds) != 1 || ds[0].WebhookID != w.ID || ds[0].EventType != hourglass.EventOrderExpiring || ds[0].OrderID != o.ID {
			t.Fatalf("deliveries %+v, want one order.expiring of order %d to webhook %d", ds, o.ID, w.ID)
		}
		sameBodies(t, f, w, o.ID)
		// The order is unchanged, and still closes at its deadline.
		if got := f.order(t, o.ID); got.Status != hourglass.StatePendingPayment || !got.Deadline.Equal(at(30*time.Second)) {
			t.Fatalf("order after its reminder %+v", got)
		}
		f.clock.Set(at(30 * time.Second))
		if closed := f.closeOrders(t, o.ID); len(closed) != 1 {
			t.Fatalf("CloseOrders at the deadline = %+v", closed)
		}
	})

	t.Run("NotAfterPayCancelClose", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		paid, cancelled, closed := f.create(t, 0, item("A", 1)), f.create(t, 0, item("A", 1)), f.create(t, 0, item("A", 1))
		f.clock.Set(at(19 * time.Second))
		f.pay(t, paid.ID, "pay-1")
		f.transition(t, cancelled.ID, hourglass.ActionCancel)
		if due := dueReminders(t, f); !slices.Equal(due, []hourglass.DueItem{{ID: hourglass.ReminderID(closed.ID), At: at(20 * time.Second)}}) {
			t.Fatalf("RemindersDue after pay and cancel = %+v, want only order %d's", due, closed.ID)
		}
		// The closer closes the third at its deadline before the reminder
		// ran (the process was down, say).
		f.clock.Set(at(30 * time.Second))
		if c := f.closeOrders(t, closed.ID); len(c) != 1 {
			t.Fatalf("CloseOrders = %+v", c)
		}
		// Their reminders, delivered late, are skipped: never sent.
		r := remind(t, f, paid.ID, cancelled.ID, closed.ID)
		if len(r) != 3 || reminded(r) != nil {
			t.Fatalf("RemindOrders of paid, cancelled, closed orders = %+v, want 3 skipped", r)
		}
		if r := remind(t, f, paid.ID, cancelled.ID, closed.ID); len(r) != 0 {
			t.Fatalf("RemindOrders again = %+v, want none", r)
		}
		for _, id := range []int64{paid.ID, cancelled.ID, closed.ID} {
			if got := expiring(t, f, id); len(got) != 0 {
				t.Fatalf("order %d: order.expiring %v, want none", id, got)
			}
		}
		if due := dueReminders(t, f); len(due) != 0 {
			t.Fatalf("RemindersDue = %+v, want none", due)
		}
	})

	t.Run("SkippedPastDeadline", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		o := f.create(t, 0, item("A", 1))
		// Down from 15 s to 31 s: the order is due to close, not yet closed.
		f.clock.Set(at(31 * time.Second))
		r := remind(t, f, o.ID)
		want := []hourglass.RemindedOrder{{OrderID: o.ID, RemindAt: at(20 * time.Second), Deadline: at(30 * time.Second), Skipped: true}}
		if !slices.EqualFunc(r, want, sameReminded) {
			t.Fatalf("RemindOrders past the deadline = %+v, want %+v", r, want)
		}
		if got := expiring(t, f, o.ID); len(got) != 0 {
			t.Fatalf("order.expiring %v past the deadline, want none", got)
		}
		if r := remind(t, f, o.ID); len(r) != 0 {
			t.Fatalf("RemindOrders again = %+v, want none", r)
		}
		if due := dueReminders(t, f); len(due) != 0 {
			t.Fatalf("RemindersDue = %+v, want none", due)
		}
	})

	t.Run("OncePerDeadline", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		extend := func(t *testing.T, p hourglass.ExtendOrderParams) hourglass.Order {
			t.Helper()
			o, err := f.db.ExtendOrder(f.ctx, p)
			if err != nil {
				t.Fatalf("ExtendOrder(%+v): %v", p, err)
			}
			return o
		}
		w := f.webhook(t, "expiring", hourglass.EventOrderExpiring)
		before, after, late := f.create(t, 0, item("A", 1)), f.create(t, 0, item("A", 1)), f.create(t, 0, item("A", 1))
		// Extended before its reminder: one, at the new time.
		f.clock.Set(at(5 * time.Second))
		if o := extend(t, hourglass.ExtendOrderParams{ID: before.ID, Deadline: at(60 * time.Second)}); !o.RemindAt.Equal(at(50 * time.Second)) {
			t.Fatalf("extended to 60 s: reminds at %v, want 50 s", o.RemindAt)
		}
		f.clock.Set(at(20 * time.Second))
		r := remind(t, f, before.ID, after.ID, late.ID)
		if got := reminded(r); !slices.Equal(got, []int64{after.ID, late.ID}) {
			t.Fatalf("RemindOrders at 20 s sent %v, want %d and %d (not the extended %d)", got, after.ID, late.ID, before.ID)
		}
		// Extended after its reminder: one again for the new deadline ...
		f.clock.Set(at(25 * time.Second))
		if o := extend(t, hourglass.ExtendOrderParams{ID: after.ID, By: 60 * time.Second}); !o.RemindAt.Equal(at(80 * time.Second)) {
			t.Fatalf("extended after its reminder to 90 s: reminds at %v, want 80 s", o.RemindAt)
		}
		// ... but not when that time has passed already.
		if o := extend(t, hourglass.ExtendOrderParams{ID: late.ID, By: 2 * time.Second}); !o.RemindAt.IsZero() {
			t.Fatalf("extended to 32 s at 25 s: reminds at %v, want none (22 s passed)", o.RemindAt)
		}
		want := []hourglass.DueItem{{ID: hourglass.ReminderID(before.ID), At: at(50 * time.Second)}, {ID: hourglass.ReminderID(after.ID), At: at(80 * time.Second)}}
		if due := dueReminders(t, f); !slices.Equal(due, want) {
			t.Fatalf("RemindersDue after the extensions = %+v, want %+v", due, want)
		}
		// A page of one, then the cursor.
		page, err := f.db.RemindersDue(f.ctx, hourglass.PendingDueParams{Until: farFuture, Limit: 1})
		if err != nil || len(page) != 1 {
			t.Fatalf("RemindersDue(limit 1) = %+v, %v", page, err)
		}
		if next, err := f.db.RemindersDue(f.ctx, hourglass.PendingDueParams{After: page[0].At, AfterID: page[0].ID, Until: farFuture, Limit: 10}); err != nil || !slices.Equal(next, want[1:]) {
			t.Fatalf("RemindersDue after the cursor = %+v, %v; want %+v", next, err, want[1:])
		}
		f.clock.Set(at(50 * time.Second))
		if got := reminded(remind(t, f, before.ID, after.ID, late.ID)); !slices.Equal(got, []int64{before.ID}) {
			t.Fatalf("RemindOrders at 50 s sent %v, want %d", got, before.ID)
		}
		f.clock.Set(at(80 * time.Second))
		if got := reminded(remind(t, f, before.ID, after.ID, late.ID)); !slices.Equal(got, []int64{after.ID}) {
			t.Fatalf("RemindOrders at 80 s sent %v, want %d", got, after.ID)
		}
		for _, tt := range []struct {
			id   int64
			want [][2]string
		}{
			{before.ID, [][2]string{{ms(60 * time.Second), ms(50 * time.Second)}}},
			{after.ID, [][2]string{{ms(30 * time.Second), ms(20 * time.Second)}, {ms(90 * time.Second), ms(80 * time.Second)}}},
			{late.ID, [][2]string{{ms(30 * time.Second), ms(20 * time.Second)}}},
		} {
			if got := expiring(t, f, tt.id); !slices.Equal(got, tt.want) {
				t.Errorf("order %d: order.expiring (deadline, remind_at) %v, want %v", tt.id, got, tt.want)
			}
		}
		// Each reader names the deadline each was sent for, after the
		// extensions too.
		sameBodies(t, f, w, before.ID, after.ID, late.ID)
	})

	// Partitions: a node reads only the reminders of its partitions (a
	// reminder's partition is its order's), and its feed tells a payment's
	// reminder gone.
	t.Run("PartitionsAndFeed", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		var (
			mu   sync.Mutex
			gone []int64
		)
		if feed, ok := f.db.(hourglass.DueFeed); ok {
			ctx, cancel := context.WithCancel(f.ctx)
			wait := feed.WatchDue(ctx, func(u hourglass.DueUpdate) {
				mu.Lock()
				defer mu.Unlock()
				gone = append(gone, u.Gone...)
			})
			t.Cleanup(func() { cancel(); wait() })
		}
		a, b := f.create(t, 0, item("A", 1)), f.create(t, 0, item("A", 1))
		if hourglass.PartitionOf(hourglass.ReminderID(a.ID)) != hourglass.PartitionOf(a.ID) {
			t.Fatalf("reminder %d is in partition %d, its order %d in %d", hourglass.ReminderID(a.ID), hourglass.PartitionOf(hourglass.ReminderID(a.ID)), a.ID, hourglass.PartitionOf(a.ID))
		}
		want := []hourglass.DueItem{{ID: hourglass.ReminderID(b.ID), At: b.RemindAt}}
		if hourglass.PartitionOf(a.ID) == hourglass.PartitionOf(b.ID) { // ids that step by 64
			want = append([]hourglass.DueItem{{ID: hourglass.ReminderID(a.ID), At: a.RemindAt}}, want...)
		}
		due, err := f.db.RemindersDue(f.ctx, hourglass.PendingDueParams{Until: farFuture, Limit: 10, Parts: hourglass.Parts{hourglass.PartitionOf(b.ID)}})
		if err != nil || !slices.Equal(due, want) {
			t.Fatalf("RemindersDue of order %d's partition = %+v, %v; want only its reminder", b.ID, due, err)
		}
		if due, err := f.db.RemindersDue(f.ctx, hourglass.PendingDueParams{Until: farFuture, Limit: 10, Parts: hourglass.Parts{}}); err != nil || len(due) != 0 {
			t.Fatalf("RemindersDue of no partition = %+v, %v", due, err)
		}
		f.pay(t, a.ID, "pay-a")
		if _, ok := f.db.(hourglass.DueFeed); ok {
			mu.Lock()
			defer mu.Unlock()
			if !slices.Contains(gone, hourglass.ReminderID(a.ID)) {
				t.Errorf("due feed: gone %v after the payment, want reminder %d", gone, hourglass.ReminderID(a.ID))
			}
		}
	})

	t.Run("Leads", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		for _, tt := range []struct {
			name    string
			p       hourglass.CreateOrderParams
			lead    time.Duration
			remind  time.Duration // from Epoch; 0: none
			invalid bool
		}{
			{name: "policy default", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("A", 1)}}, lead: 10 * time.Second, remind: 20 * time.Second},
			{name: "category's lead, the longest", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("A", 1), item("B", 1)}}, lead: 25 * time.Second, remind: 5 * time.Second},
			{name: "the create's own", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("B", 1)}, RemindBefore: 3 * time.Second}, lead: 3 * time.Second, remind: 27 * time.Second},
			{name: "none asked", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("A", 1)}, RemindBefore: hourglass.NoReminder}},
			{name: "lead as long as the timeout", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("A", 1)}, RemindBefore: 30 * time.Second}, lead: 30 * time.Second},
			{name: "lead longer than the timeout", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("A", 1)}, Timeout: 5 * time.Second}, lead: 10 * time.Second},
			{name: "lead too short", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("A", 1)}, RemindBefore: 999 * time.Millisecond}, invalid: true},
			{name: "lead too long", p: hourglass.CreateOrderParams{Items: []hourglass.Item{item("A", 1)}, RemindBefore: hourglass.MaxTimeout + time.Second}, invalid: true},
		} {
			tt.p.UserID = "u1"
			o, _, err := f.db.CreateOrder(f.ctx, tt.p)
			if tt.invalid {
				wantCode(t, err, hourglass.CodeInvalidArgument)
				continue
			}
			if err != nil {
				t.Fatalf("%s: CreateOrder: %v", tt.name, err)
			}
			var want time.Time
			if tt.remind != 0 {
				want = at(tt.remind)
			}
			if o.RemindBefore != tt.lead || !o.RemindAt.Equal(want) {
				t.Errorf("%s: lead %s, reminds at %v; want %s, %v", tt.name, o.RemindBefore, o.RemindAt, tt.lead, want)
			}
		}
		got, err := f.db.Policy(f.ctx)
		if err != nil || got.RemindBefore != 10*time.Second || !maps.Equal(got.RemindCategories, map[string]time.Duration{"early": 25 * time.Second}) {
			t.Fatalf("Policy = %+v, %v; want its reminder leads back", got, err)
		}
		for _, bad := range []hourglass.Policy{
			{DefaultTimeout: time.Minute, RemindBefore: time.Millisecond},
			{DefaultTimeout: time.Minute, RemindCategories: map[string]time.Duration{"x": hourglass.MaxTimeout + time.Second}},
			{DefaultTimeout: time.Minute, RemindCategories: map[string]time.Duration{"": time.Minute}},
		} {
			wantCode(t, f.db.PutPolicy(f.ctx, bad), hourglass.CodeInvalidArgument)
		}
	})

	// SameTransaction races payments against reminders at remind_at: the
	// check that the order is pending and the event are one step, so no
	// order.expiring comes after its order's order.paid.
	t.Run("SameTransaction", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		const n = 40
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = f.create(t, 0, item("A", 1)).ID
		}
		f.clock.Set(at(20 * time.Second))
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for i, id := range ids {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := f.db.PayOrder(f.ctx, id, fmt.Sprintf("pay-%d", i)); err != nil {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := f.db.RemindOrders(f.ctx, []int64{id}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sent := 0
		for _, id := range ids {
			var types []hourglass.EventType
			for _, e := range f.events(t, id) {
				types = append(types, e.Type)
			}
			switch {
			case slices.Equal(types, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderPaid}):
			case slices.Equal(types, []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderExpiring, hourglass.EventOrderPaid}):
				sent++
			default:
				t.Fatalf("order %d: events %v; want created, [expiring,] paid", id, types)
			}
		}
		t.Logf("%d of %d reminders committed before their payment", sent, n)
	})
}

// reminded returns the ids of the orders RemindOrders sent a reminder to.
func reminded(r []hourglass.RemindedOrder) []int64 {
	var out []int64
	for _, x := range r {
		if !x.Skipped {
			out = append(out, x.OrderID)
		}
	}
	slices.Sort(out)
	return out
}

func sameReminded(a, b hourglass.RemindedOrder) bool {
	return a.OrderID == b.OrderID && a.RemindAt.Equal(b.RemindAt) && a.Deadline.Equal(b.Deadline) && a.SentAt.Equal(b.SentAt) && a.Skipped == b.Skipped
}
