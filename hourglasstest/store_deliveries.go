package hourglasstest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseDeliveries covers the delivery queue (DeliveryStore) and dead
// letters: fan-out, DueDeliveries, PendingDelivery, NextDelivery,
// RecordAttempt, DeadLetters, RetryDeadLetter, DeleteDeadLetter,
// DeliveryCounts, DeliveriesCreated.
func exerciseDeliveries(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) storeFixture {
		f := setupStore(t, h)
		f.product(t, "A", "x", 1000)
		return f
	}

	t.Run("FanOut", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		before := f.create(t, time.Minute, item("A", 1)) // before any webhook: no deliveries
		all := f.webhook(t, "all", hourglass.EventTypeAll)
		paidOnly := f.webhook(t, "paid", hourglass.EventOrderPaid)
		shippedOnly := f.webhook(t, "shipped", hourglass.EventOrderShipped)
		two := f.webhook(t, "two", hourglass.EventOrderCreated, hourglass.EventOrderPaid)
		hooks := map[int64]hourglass.Webhook{all.ID: all, paidOnly.ID: paidOnly, shippedOnly.ID: shippedOnly, two.ID: two}

		f.clock.Advance(time.Second)
		o := f.create(t, time.Minute, item("A", 1))
		createdAt := f.clock.Now()
		f.clock.Advance(time.Second)
		f.pay(t, o.ID, "p")
		paidAt := f.clock.Now()
		f.clock.Advance(time.Second)
		f.pay(t, before.ID, "p") // a paid event of the earlier order

		type key struct {
			webhook int64
			order   int64
			typ     hourglass.EventType
		}
		want := []key{
			{all.ID, o.ID, hourglass.EventOrderCreated}, {two.ID, o.ID, hourglass.EventOrderCreated},
			{all.ID, o.ID, hourglass.EventOrderPaid}, {paidOnly.ID, o.ID, hourglass.EventOrderPaid}, {two.ID, o.ID, hourglass.EventOrderPaid},
			{all.ID, before.ID, hourglass.EventOrderPaid}, {paidOnly.ID, before.ID, hourglass.EventOrderPaid}, {two.ID, before.ID, hourglass.EventOrderPaid},
		}
		events := map[int64][]hourglass.EventRecord{o.ID: f.events(t, o.ID), before.ID: f.events(t, before.ID)}
		ds := f.pendingDeliveries(t)
		var got []key
		byKey := map[key]hourglass.PendingDelivery{}
		for _, d := range ds {
			k := key{d.WebhookID, d.OrderID, d.EventType}
			got = append(got, k)
			byKey[k] = d
			w := hooks[d.WebhookID]
			if d.URL != w.URL || d.Secret != w.Secret || d.Attempts != 0 {
				t.Errorf("delivery %+v: want webhook %+v's url and secret, no attempts", d, w)
			}
			i := slices.IndexFunc(events[d.OrderID], func(e hourglass.EventRecord) bool { return e.Type == d.EventType })
			if i < 0 {
				t.Errorf("delivery %+v of no event", d)
				continue
			}
			e := events[d.OrderID][i]
			if d.EventID != e.ID || string(d.Body) != string(e.Body) || !d.NextAttemptAt.Equal(e.CreatedAt) {
				t.Errorf("delivery %d: event %s body %s due %v; want event %s body %s due at its commit %v", d.ID, d.EventID, d.Body, d.NextAttemptAt, e.ID, e.Body, e.CreatedAt)
			}
		}
		order := func(a, b key) int {
			return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.typ, b.typ), cmp.Compare(a.webhook, b.webhook))
		}
		slices.SortFunc(got, order)
		slices.SortFunc(want, order)
		if !slices.Equal(got, want) {
			t.Fatalf("deliveries\n%v\nwant\n%v", got, want)
		}
		if d := byKey[key{all.ID, o.ID, hourglass.EventOrderCreated}]; !d.NextAttemptAt.Equal(createdAt) {
			t.Errorf("created delivery due %v, want at the create %v", d.NextAttemptAt, createdAt)
		}
		if d := byKey[key{paidOnly.ID, o.ID, hourglass.EventOrderPaid}]; !d.NextAttemptAt.Equal(paidAt) {
			t.Errorf("paid delivery due %v, want at the pay %v", d.NextAttemptAt, paidAt)
		}
		if got := f.deliveryCounts(t); got != [2]int{len(want), 0} {
			t.Errorf("DeliveryCounts = %v, want %d pending, 0 dead", got, len(want))
		}

		// Events of one order reach a webhook in order: a later one is
		// blocked by the earlier pending one of the same webhook and order.
		for _, w := range []hourglass.Webhook{all, two} {
			first, second := byKey[key{w.ID, o.ID, hourglass.EventOrderCreated}], byKey[key{w.ID, o.ID, hourglass.EventOrderPaid}]
			if first.BlockedBy != (hourglass.DeliveryTimer{}) {
				t.Errorf("webhook %d: the first delivery is blocked by %+v", w.ID, first.BlockedBy)
			}
			if second.BlockedBy.ID != first.ID || !second.BlockedBy.At.Equal(first.NextAttemptAt) {
				t.Errorf("webhook %d: the paid delivery is blocked by %+v, want %d at %v", w.ID, second.BlockedBy, first.ID, first.NextAttemptAt)
			}
			next, ok, err := f.db.NextDelivery(f.ctx, w.ID, o.ID)
			if err != nil || !ok || next.ID != first.ID || !next.At.Equal(first.NextAttemptAt) {
				t.Errorf("NextDelivery(%d, %d) = %+v, %v, %v; want %d", w.ID, o.ID, next, ok, err, first.ID)
			}
		}
		// Another webhook's or another order's delivery blocks nothing.
		for _, k := range []key{{paidOnly.ID, o.ID, hourglass.EventOrderPaid}, {all.ID, before.ID, hourglass.EventOrderPaid}} {
			if d := byKey[k]; d.BlockedBy != (hourglass.DeliveryTimer{}) {
				t.Errorf("%+v blocked by %+v", k, d.BlockedBy)
			}
		}
		if next, ok, err := f.db.NextDelivery(f.ctx, paidOnly.ID, o.ID); err != nil || !ok || next.ID != byKey[key{paidOnly.ID, o.ID, hourglass.EventOrderPaid}].ID {
			t.Errorf("NextDelivery(paid only) = %+v, %v, %v", next, ok, err)
		}
		if next, ok, err := f.db.NextDelivery(f.ctx, shippedOnly.ID, o.ID); err != nil || ok {
			t.Errorf("NextDelivery(no deliveries) = %+v, %v, %v; want none", next, ok, err)
		}
		_, err := f.db.PendingDelivery(f.ctx, 999999)
		wantCode(t, err, hourglass.CodeNotFound)

		// Ship and complete: only the subscribers of each type get it.
		f.transition(t, o.ID, hourglass.ActionShip)
		f.transition(t, o.ID, hourglass.ActionComplete)
		n := map[hourglass.EventType][]int64{}
		for _, d := range f.pendingDeliveries(t) {
			if d.OrderID == o.ID && (d.EventType == hourglass.EventOrderShipped || d.EventType == hourglass.EventOrderCompleted) {
				n[d.EventType] = append(n[d.EventType], d.WebhookID)
			}
		}
		slices.Sort(n[hourglass.EventOrderShipped])
		if got, want := fmt.Sprint(n), fmt.Sprint(map[hourglass.EventType][]int64{
			hourglass.EventOrderShipped: {all.ID, shippedOnly.ID}, hourglass.EventOrderCompleted: {all.ID},
		}); got != want {
			t.Errorf("ship and complete fanned out to %s, want %s", got, want)
		}
	})

	t.Run("DeliveriesCreated", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		ch := f.db.DeliveriesCreated()
		if ch == nil {
			t.Fatal("DeliveriesCreated returned nil")
		}
		f.webhook(t, "all", hourglass.EventTypeAll)
		for _, write := range []struct {
			name string
			run  func() int64
		}{
			{"create", func() int64 { return f.create(t, time.Minute, item("A", 1)).ID }},
			{"pay", func() int64 { o := f.create(t, time.Minute, item("A", 1)); drain(ch); f.pay(t, o.ID, "p"); return o.ID }},
			{"cancel", func() int64 {
				o := f.create(t, time.Minute, item("A", 1))
				drain(ch)
				f.transition(t, o.ID, hourglass.ActionCancel)
				return o.ID
			}},
			{"close", func() int64 {
				o := f.create(t, time.Second, item("A", 1))
				drain(ch)
				f.clock.Set(o.Deadline)
				f.closeOrders(t, o.ID)
				return o.ID
			}},
		} {
			drain(ch)
			write.run()
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no value on DeliveriesCreated after a commit that created deliveries", write.name)
			}
		}
	})

	t.Run("StreamOrder", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		w := f.webhook(t, "w", hourglass.EventOrderCreated, hourglass.EventOrderCancelled)
		o := f.create(t, time.Minute, item("A", 1))
		f.clock.Advance(time.Second)
		f.transition(t, o.ID, hourglass.ActionCancel)
		ds := f.pendingDeliveries(t)
		if len(ds) != 2 || ds[0].EventType != hourglass.EventOrderCreated || ds[1].EventType != hourglass.EventOrderCancelled {
			t.Fatalf("deliveries %+v, want created then cancelled", ds)
		}
		first, second := ds[0], ds[1]
		check := func(step string, blocked bool, next int64) {
			t.Helper()
			d, err := f.db.PendingDelivery(f.ctx, second.ID)
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if blocked && (d.BlockedBy.ID != first.ID) || !blocked && d.BlockedBy != (hourglass.DeliveryTimer{}) {
				t.Fatalf("%s: the second is blocked by %+v, want blocked=%v by %d", step, d.BlockedBy, blocked, first.ID)
			}
			tm, ok, err := f.db.NextDelivery(f.ctx, w.ID, o.ID)
			if err != nil || !ok || tm.ID != next {
				t.Fatalf("%s: NextDelivery = %+v, %v, %v; want %d", step, tm, ok, err, next)
			}
		}
		check("new", true, first.ID)
		// A retry later than the second keeps the order: the second waits.
		retryAt := f.clock.Now().Add(time.Hour)
		stream := func(r hourglass.AttemptResult) hourglass.AttemptResult {
			r.WebhookID, r.OrderID = w.ID, o.ID
			return r
		}
		// RecordAttempt returns the stream's next delivery once it resolves
		// one, and only then.
		record := func(step string, r hourglass.AttemptResult, next int64) {
			t.Helper()
			rec, err := f.db.RecordAttempt(f.ctx, stream(r))
			if err != nil || !rec.Recorded || rec.Next.ID != next {
				t.Fatalf("%s: RecordAttempt = %+v, %v; want recorded, next %d", step, rec, err, next)
			}
		}
		record("retry", hourglass.AttemptResult{ID: first.ID, Error: "x", RetryAt: retryAt}, 0)
		check("first retried later", true, first.ID)
		if d, _ := f.db.PendingDelivery(f.ctx, second.ID); !d.BlockedBy.At.Equal(retryAt) {
			t.Fatalf("BlockedBy.At = %v, want the first's new time %v", d.BlockedBy.At, retryAt)
		}
		record("dead", hourglass.AttemptResult{ID: first.ID, Attempts: 1, Error: "x"}, second.ID)
		check("first dead", false, second.ID) // a dead letter blocks nothing
		if _, err := f.db.RetryDeadLetter(f.ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		check("first retried from dead", true, first.ID)
		record("first delivered", hourglass.AttemptResult{ID: first.ID, Attempts: 0, OK: true}, second.ID)
		check("first delivered", false, second.ID)
		record("second delivered", hourglass.AttemptResult{ID: second.ID, Attempts: 0, OK: true}, 0)
		if tm, ok, err := f.db.NextDelivery(f.ctx, w.ID, o.ID); err != nil || ok {
			t.Fatalf("NextDelivery of a delivered stream = %+v, %v, %v", tm, ok, err)
		}
	})

	t.Run("DueDeliveriesPagesAndUntil", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.webhook(t, "all", hourglass.EventTypeAll)
		var want []hourglass.DeliveryTimer
		for _, at := range []time.Duration{0, time.Second, time.Second, time.Second, 2 * time.Second, 2*time.Second + time.Millisecond, 3 * time.Second} {
			f.clock.Set(Epoch.Add(at))
			f.create(t, time.Minute, item("A", 1))
		}
		for _, d := range f.pendingDeliveries(t) { // paged by 3, order checked
			want = append(want, hourglass.DeliveryTimer{ID: d.ID, At: d.NextAttemptAt})
		}
		if len(want) != 7 {
			t.Fatalf("%d deliveries, want 7", len(want))
		}
		sameDue := func(a, b []hourglass.DeliveryTimer) bool {
			return slices.EqualFunc(a, b, func(x, y hourglass.DeliveryTimer) bool { return x.ID == y.ID && x.At.Equal(y.At) })
		}
		for _, tt := range []struct {
			until time.Time
			n     int
		}{
			{Epoch.Add(-time.Millisecond), 0},
			{Epoch, 1},
			{Epoch.Add(time.Second), 4},
			{Epoch.Add(2 * time.Second), 5}, // until is inclusive, to the millisecond
			{Epoch.Add(3 * time.Second), 7},
		} {
			if got := f.due(t, tt.until); !sameDue(got, want[:tt.n]) {
				t.Errorf("due until %v: %v, want %v", tt.until.Sub(Epoch), got, want[:tt.n])
			}
		}
		// A cursor inside a group of equal times continues by id.
		page, err := f.db.DueDeliveries(f.ctx, hourglass.DueDeliveriesParams{After: want[2].At, AfterID: want[2].ID, Until: farFuture, Limit: 2})
		if err != nil || !sameDue(page, want[3:5]) {
			t.Fatalf("after %+v: %v, %v; want %v", want[2], page, err, want[3:5])
		}
		// A retry moves a delivery to its new time.
		retryAt := Epoch.Add(time.Hour)
		if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: want[0].ID, Error: "HTTP 502", RetryAt: retryAt}); !rec.Recorded || err != nil {
			t.Fatalf("record retry: %v, %v", rec.Recorded, err)
		}
		moved := append(slices.Clone(want[1:]), hourglass.DeliveryTimer{ID: want[0].ID, At: retryAt})
		if got := f.due(t, farFuture); !sameDue(got, moved) {
			t.Fatalf("after a retry: %v, want %v", got, moved)
		}
		if got := f.due(t, retryAt.Add(-time.Millisecond)); !sameDue(got, want[1:]) {
			t.Fatalf("before the retry time: %v, want %v", got, want[1:])
		}
	})

	t.Run("RecordAttempt", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		w := f.webhook(t, "all", hourglass.EventTypeAll)
		var ds []hourglass.PendingDelivery
		for range 3 {
			f.create(t, time.Minute, item("A", 1))
		}
		ds = f.pendingDeliveries(t)
		if len(ds) != 3 {
			t.Fatalf("%d deliveries, want 3", len(ds))
		}
		record := func(r hourglass.AttemptResult) bool {
			t.Helper()
			rec, err := f.db.RecordAttempt(f.ctx, r)
			if err != nil {
				t.Fatalf("RecordAttempt(%+v): %v", r, err)
			}
			return rec.Recorded
		}
		pending := func(id int64) hourglass.PendingDelivery {
			t.Helper()
			d, err := f.db.PendingDelivery(f.ctx, id)
			if err != nil {
				t.Fatalf("PendingDelivery(%d): %v", id, err)
			}
			return d
		}
		delivered, retried, dead := ds[0], ds[1], ds[2]

		// Delivered: the row is gone; a second record finds nothing.
		if record(hourglass.AttemptResult{ID: delivered.ID, Attempts: 1, OK: true}) {
			t.Fatal("recorded with a wrong attempt count (1, the delivery has 0)")
		}
		if !record(hourglass.AttemptResult{ID: delivered.ID, Attempts: 0, OK: true}) {
			t.Fatal("delivered: not recorded")
		}
		_, err := f.db.PendingDelivery(f.ctx, delivered.ID)
		wantCode(t, err, hourglass.CodeNotFound)
		if record(hourglass.AttemptResult{ID: delivered.ID, Attempts: 0, OK: true}) {
			t.Fatal("delivered twice")
		}

		// Retried: attempts 1, due at RetryAt, the error kept for later.
		retryAt := f.clock.Now().Add(30 * time.Second)
		if !record(hourglass.AttemptResult{ID: retried.ID, Attempts: 0, Error: "HTTP 500", RetryAt: retryAt}) {
			t.Fatal("retry: not recorded")
		}
		after := pending(retried.ID)
		if after.Attempts != 1 || !after.NextAttemptAt.Equal(retryAt) || string(after.Body) != string(retried.Body) || after.EventID != retried.EventID {
			t.Fatalf("after a retry: %+v; want attempts 1, due %v, the same body", after, retryAt)
		}
		// A stale count (another attempt was recorded first) changes nothing, whatever the outcome.
		for _, stale := range []hourglass.AttemptResult{
			{ID: retried.ID, Attempts: 0, OK: true},
			{ID: retried.ID, Attempts: 0, Error: "x", RetryAt: retryAt.Add(time.Hour)},
			{ID: retried.ID, Attempts: 0, Error: "x"},
			{ID: retried.ID, Attempts: 2, OK: true},
		} {
			if record(stale) {
				t.Fatalf("stale %+v recorded", stale)
			}
			if got := pending(retried.ID); got.Attempts != 1 || !got.NextAttemptAt.Equal(retryAt) {
				t.Fatalf("stale %+v changed the delivery: %+v", stale, got)
			}
		}
		if dls, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10}); err != nil || len(dls) != 0 {
			t.Fatalf("a stale dead record made a dead letter: %+v, %v", dls, err)
		}

		// Dead: a dead letter with the attempts made and the last error.
		if !record(hourglass.AttemptResult{ID: dead.ID, Attempts: 0, Error: "HTTP 503", RetryAt: retryAt}) {
			t.Fatal("retry before dead: not recorded")
		}
		f.clock.Advance(time.Minute)
		if !record(hourglass.AttemptResult{ID: dead.ID, Attempts: 1, Error: "HTTP 410: gone"}) {
			t.Fatal("dead: not recorded")
		}
		_, err = f.db.PendingDelivery(f.ctx, dead.ID)
		wantCode(t, err, hourglass.CodeNotFound)
		if record(hourglass.AttemptResult{ID: dead.ID, Attempts: 2, OK: true}) {
			t.Fatal("an attempt recorded on a dead letter")
		}
		dls, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10})
		want := hourglass.DeadLetter{ID: dead.ID, WebhookID: w.ID, EventID: dead.EventID, EventType: hourglass.EventOrderCreated,
			OrderID: dead.OrderID, Attempts: 2, LastError: "HTTP 410: gone", FailedAt: f.clock.Now()}
		if err != nil || len(dls) != 1 || !sameDeadLetter(dls[0], want) {
			t.Fatalf("dead letters %+v, %v; want %+v", dls, err, want)
		}
		if got := f.deliveryCounts(t); got != [2]int{1, 1} {
			t.Fatalf("DeliveryCounts = %v, want 1 pending (the retried), 1 dead", got)
		}
		if got := f.due(t, farFuture); len(got) != 1 || got[0].ID != retried.ID {
			t.Fatalf("due: %v; want only the retried one (a dead letter is not due)", got)
		}
		if record(hourglass.AttemptResult{ID: 999999, OK: true}) {
			t.Fatal("recorded an attempt of an unknown delivery")
		}
	})

	t.Run("RecordAttemptUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.webhook(t, "all", hourglass.EventTypeAll)
		f.create(t, time.Minute, item("A", 1))
		ds := f.pendingDeliveries(t)
		if len(ds) != 1 {
			t.Fatalf("%d deliveries", len(ds))
		}
		var won atomic.Int64
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := hourglass.AttemptResult{ID: ds[0].ID, Attempts: 0, Error: fmt.Sprint("attempt ", g), RetryAt: Epoch.Add(time.Duration(g+1) * time.Minute)}
				if g%3 == 0 {
					r = hourglass.AttemptResult{ID: ds[0].ID, Attempts: 0, OK: true}
				}
				rec, err := f.db.RecordAttempt(f.ctx, r)
				if err != nil {
					t.Errorf("RecordAttempt: %v", err)
				}
				if rec.Recorded {
					won.Add(1)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d of 12 concurrent records with the same attempt count applied, want exactly 1", won.Load())
		}
		if d, err := f.db.PendingDelivery(f.ctx, ds[0].ID); err == nil && d.Attempts != 1 {
			t.Fatalf("after one retry won: %+v", d)
		}
	})

	t.Run("DeadLetters", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		w := f.webhook(t, "all", hourglass.EventTypeAll)
		o := f.create(t, time.Minute, item("A", 1))
		f.transition(t, o.ID, hourglass.ActionCancel)
		for range 4 {
			f.create(t, time.Minute, item("A", 1))
		}
		ds := f.pendingDeliveries(t)
		if len(ds) != 6 {
			t.Fatalf("%d deliveries, want 6", len(ds))
		}
		f.clock.Advance(time.Minute)
		var dead []hourglass.DeadLetter
		for i, d := range ds[:5] {
			if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: fmt.Sprint("error ", i)}); !rec.Recorded || err != nil {
				t.Fatalf("record dead: %v, %v", rec.Recorded, err)
			}
			dead = append(dead, hourglass.DeadLetter{ID: d.ID, WebhookID: w.ID, EventID: d.EventID, EventType: d.EventType, OrderID: d.OrderID,
				Attempts: 1, LastError: fmt.Sprint("error ", i), FailedAt: f.clock.Now()})
		}
		slices.SortFunc(dead, func(a, b hourglass.DeadLetter) int { return cmp.Compare(a.ID, b.ID) })
		var got []hourglass.DeadLetter
		for after, n := int64(0), 0; ; n++ {
			if n > maxPages {
				t.Fatalf("DeadLetters paging does not end: the cursor does not advance")
			}
			page, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > 2 {
				t.Fatalf("limit 2: a page of %d", len(page))
			}
			got = append(got, page...)
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].ID
		}
		if !slices.EqualFunc(got, dead, sameDeadLetter) {
			t.Fatalf("dead letters\n%+v\nwant\n%+v", got, dead)
		}
		if got := f.deliveryCounts(t); got != [2]int{1, 5} {
			t.Fatalf("DeliveryCounts = %v, want 1 pending, 5 dead", got)
		}

		// Retry: pending again, attempts reset, due now.
		f.clock.Advance(time.Minute)
		retried := dead[1]
		tm, err := f.db.RetryDeadLetter(f.ctx, retried.ID)
		if err != nil || tm.ID != retried.ID || !tm.At.Equal(f.clock.Now()) {
			t.Fatalf("RetryDeadLetter = %+v, %v; want due now %v", tm, err, f.clock.Now())
		}
		d, err := f.db.PendingDelivery(f.ctx, retried.ID)
		if err != nil || d.Attempts != 0 || !d.NextAttemptAt.Equal(f.clock.Now()) || d.EventID != retried.EventID {
			t.Fatalf("retried delivery %+v, %v", d, err)
		}
		if due := f.due(t, f.clock.Now()); !slices.ContainsFunc(due, func(d hourglass.DeliveryTimer) bool { return d.ID == retried.ID }) {
			t.Fatalf("retried delivery not due now: %v", due)
		}
		_, err = f.db.RetryDeadLetter(f.ctx, retried.ID) // pending now, not dead
		wantCode(t, err, hourglass.CodeNotFound)
		_, err = f.db.RetryDeadLetter(f.ctx, 999999)
		wantCode(t, err, hourglass.CodeNotFound)
		if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: retried.ID, Attempts: 0, OK: true}); !rec.Recorded || err != nil {
			t.Fatalf("deliver the retried one: %v, %v", rec.Recorded, err)
		}

		// Delete: gone, once.
		gone := dead[3]
		if dl, err := f.db.DeleteDeadLetter(f.ctx, gone.ID); err != nil || !sameDeadLetter(dl, gone) {
			t.Fatalf("DeleteDeadLetter = %+v, %v; want %+v", dl, err, gone)
		}
		_, err = f.db.DeleteDeadLetter(f.ctx, gone.ID)
		wantCode(t, err, hourglass.CodeNotFound)
		_, err = f.db.RetryDeadLetter(f.ctx, gone.ID)
		wantCode(t, err, hourglass.CodeNotFound)
		_, err = f.db.DeleteDeadLetter(f.ctx, ds[5].ID) // a pending delivery is not a dead letter
		wantCode(t, err, hourglass.CodeNotFound)
		if _, err := f.db.PendingDelivery(f.ctx, ds[5].ID); err != nil {
			t.Fatalf("a refused DeleteDeadLetter removed a pending delivery: %v", err)
		}
		rest := []hourglass.DeadLetter{dead[0], dead[2], dead[4]}
		if got, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10}); err != nil || !slices.EqualFunc(got, rest, sameDeadLetter) {
			t.Fatalf("dead letters after retry and delete: %+v, %v; want %+v", got, err, rest)
		}
		if got := f.deliveryCounts(t); got != [2]int{1, 3} {
			t.Fatalf("DeliveryCounts = %v, want 1 pending, 3 dead", got)
		}
	})

	t.Run("DeleteWebhookRemovesItsRows", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		gone := f.webhook(t, "gone", hourglass.EventTypeAll)
		kept := f.webhook(t, "kept", hourglass.EventTypeAll)
		for range 3 {
			f.create(t, time.Minute, item("A", 1))
		}
		var goneIDs, keptIDs []int64
		for _, d := range f.pendingDeliveries(t) {
			if d.WebhookID == gone.ID {
				goneIDs = append(goneIDs, d.ID)
			} else {
				keptIDs = append(keptIDs, d.ID)
			}
		}
		if len(goneIDs) != 3 || len(keptIDs) != 3 {
			t.Fatalf("deliveries %v and %v, want 3 each", goneIDs, keptIDs)
		}
		for _, id := range []int64{goneIDs[0], keptIDs[0]} {
			if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: id, Error: "x"}); !rec.Recorded || err != nil {
				t.Fatalf("record dead: %v, %v", rec.Recorded, err)
			}
		}
		if got := f.deliveryCounts(t); got != [2]int{4, 2} {
			t.Fatalf("DeliveryCounts = %v", got)
		}
		if got, err := f.db.DeleteWebhook(f.ctx, gone.ID); err != nil || !sameWebhook(got, gone) {
			t.Fatalf("DeleteWebhook = %+v, %v", got, err)
		}
		if got := f.deliveryCounts(t); got != [2]int{2, 1} {
			t.Fatalf("DeliveryCounts after delete = %v, want only the kept webhook's 2 pending, 1 dead", got)
		}
		for _, id := range goneIDs[1:] {
			_, err := f.db.PendingDelivery(f.ctx, id)
			wantCode(t, err, hourglass.CodeNotFound)
			if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: id, Attempts: 0, OK: true}); rec.Recorded || err != nil {
				t.Fatalf("RecordAttempt of a deleted webhook's delivery = %v, %v; want false", rec.Recorded, err)
			}
		}
		_, err := f.db.RetryDeadLetter(f.ctx, goneIDs[0])
		wantCode(t, err, hourglass.CodeNotFound)
		if dls, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10}); err != nil || len(dls) != 1 || dls[0].ID != keptIDs[0] {
			t.Fatalf("dead letters after delete: %+v, %v", dls, err)
		}
		f.create(t, time.Minute, item("A", 1))
		for _, d := range f.pendingDeliveries(t) {
			if d.WebhookID != kept.ID {
				t.Fatalf("a deleted webhook received %+v", d)
			}
		}
		if got := f.deliveryCounts(t); got != [2]int{3, 1} {
			t.Fatalf("DeliveryCounts = %v, want the kept webhook's new delivery", got)
		}
	})
}

// drain empties a wake-up channel.
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func sameDeadLetter(a, b hourglass.DeadLetter) bool {
	fa, fb := a.FailedAt, b.FailedAt
	a.FailedAt, b.FailedAt = time.Time{}, time.Time{}
	return a == b && fa.Equal(fb)
}
