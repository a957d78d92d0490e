package hourglasstest

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseDeadLetterLists covers DeadLetters' filters (GET
// /v1/deadletters): webhook, event type and the failure range, alone and
// combined, their bounds ([From, Before), to the millisecond and below it),
// the order each sorts in, paging across pages with each cursor, and that
// pending deliveries are never listed.
func exerciseDeadLetterLists(t *testing.T, h StoreHarness) {
	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 1000)
		all := f.webhook(t, "all", hourglass.EventTypeAll)
		created := f.webhook(t, "created", hourglass.EventOrderCreated)
		for i := range 8 {
			o := f.create(t, time.Minute, item("A", 1))
			if i%2 == 0 {
				f.transition(t, o.ID, hourglass.ActionCancel)
			}
		}
		// 20 deliveries (8 creates and 4 cancels to all, 8 creates to
		// created); all but every fifth die, two a second (pairs share a
		// failure time), the rest stay pending.
		ds := f.pendingDeliveries(t)
		if len(ds) != 20 {
			t.Fatalf("%d deliveries, want 20", len(ds))
		}
		for i, d := range ds {
			if i%5 == 4 {
				continue
			}
			f.clock.Set(Epoch.Add(time.Duration(10+i/2) * time.Second))
			if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: fmt.Sprint("error ", i), WebhookID: d.WebhookID, OrderID: d.OrderID}); err != nil || !rec.Recorded {
				t.Fatalf("record dead %d: %v, %v", d.ID, rec.Recorded, err)
			}
		}
		var dead []hourglass.DeadLetter
		for after := int64(0); ; {
			page, err := f.db.DeadLetters(f.ctx, hourglass.DeadLetterFilter{After: after, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			dead = append(dead, page...)
			if len(page) < 100 {
				break
			}
			after = page[len(page)-1].ID
		}
		if len(dead) != 16 {
			t.Fatalf("%d dead letters, want 16", len(dead))
		}
		at := func(d time.Duration) time.Time { return Epoch.Add(d) }
		const s, ms = time.Second, time.Millisecond
		cases := []hourglass.DeadLetterFilter{
			{},
			{WebhookID: all.ID},
			{WebhookID: created.ID},
			{WebhookID: created.ID + all.ID + 100},
			{EventType: hourglass.EventOrderCancelled},
			{EventType: hourglass.EventOrderCreated, WebhookID: all.ID},
			{EventType: hourglass.EventTimerFired},
			{FailedFrom: at(14 * s)},
			{FailedBefore: at(14 * s)},
			{FailedFrom: at(12 * s), FailedBefore: at(17 * s)},
			{FailedFrom: at(17 * s), FailedBefore: at(12 * s)}, // empty
			{FailedFrom: at(12 * s), FailedBefore: at(17 * s), WebhookID: created.ID},
			{FailedFrom: at(12 * s), WebhookID: all.ID},
			{FailedBefore: at(17 * s), EventType: hourglass.EventOrderCancelled},
			// Bounds: From includes its instant, Before excludes it.
			{FailedFrom: at(14 * s), FailedBefore: at(14*s + ms)},
			{FailedFrom: at(14 * s), FailedBefore: at(14 * s)},
			{FailedFrom: at(14*s - ms/2), FailedBefore: at(14*s + ms/2)},
			{FailedFrom: at(14*s + time.Microsecond)},
		}
		for _, c := range cases {
			want := referenceDeadLetterList(dead, c)
			for _, limit := range []int{100, 1, 2, 3} {
				var got []hourglass.DeadLetter
				page := c
				page.Limit = limit
				for n := 0; ; n++ {
					if n > maxPages {
						t.Fatalf("%+v: paging does not end: the cursor does not advance", c)
					}
					l, err := f.db.DeadLetters(f.ctx, page)
					if err != nil {
						t.Fatalf("%+v: %v", c, err)
					}
					if len(l) > limit {
						t.Fatalf("%+v: limit %d returned %d", c, limit, len(l))
					}
					got = append(got, l...)
					if len(l) < limit {
						break
					}
					last := l[len(l)-1]
					page.After, page.AfterFailedAt = last.ID, last.FailedAt
				}
				if !slices.EqualFunc(got, want, sameDeadLetter) {
					t.Errorf("%+v, pages of %d: %v, want %v", c, limit, deadLetterIDs(got), deadLetterIDs(want))
				}
			}
		}
		for _, i := range []int{1, 2, 4, 5, 7, 8, 9, 11, 12, 13} {
			if n := len(referenceDeadLetterList(dead, cases[i])); n == 0 || n == len(dead) {
				t.Errorf("%+v: the reference lists %d of %d dead letters", cases[i], n, len(dead))
			}
		}
	})
}

// referenceDeadLetterList is what DeadLetters must return for f (its
// cursor and limit aside) from all.
func referenceDeadLetterList(all []hourglass.DeadLetter, f hourglass.DeadLetterFilter) []hourglass.DeadLetter {
	var out []hourglass.DeadLetter
	for _, d := range all {
		if (f.WebhookID == 0 || d.WebhookID == f.WebhookID) && (f.EventType == "" || d.EventType == f.EventType) &&
			(f.FailedFrom.IsZero() || !d.FailedAt.Before(f.FailedFrom)) && (f.FailedBefore.IsZero() || d.FailedAt.Before(f.FailedBefore)) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b hourglass.DeadLetter) int {
		if f.ByFailedAt() {
			return cmp.Or(a.FailedAt.Compare(b.FailedAt), cmp.Compare(a.ID, b.ID))
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

func deadLetterIDs(ds []hourglass.DeadLetter) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}
