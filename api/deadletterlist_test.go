package api_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestFindDeadLetters: each filter of GET /v1/deadletters and their
// combinations, paged at several sizes, against the whole list; next is an
// id when the list is by id, a failed_at cursor when by failure time.
func TestFindDeadLetters(t *testing.T) {
	t.Parallel()
	s := startWebhookServer(t, "127.0.0.1", 10*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond)
	rc := newHookReceiver(t)
	rc.setFail(func(int) bool { return true })
	created := s.createWebhook(t, rc.URL, "order.created")
	every := s.createWebhook(t, rc.URL, "*")
	s.putProduct(t, "mug", "kitchen", 10)
	// Each order's dead letters before the next order: their failed_at
	// times then differ between orders (on a fast run all seven could
	// fail within one millisecond, and no time range would split them).
	var all []api.DeadLetterJSON
	for i, total := range []int{2, 5, 7} {
		o := s.createOrder(t, fmt.Sprintf(`{"user_id":"u%d","items":[{"sku":"mug","quantity":1}]}`, i))
		if i == 1 {
			if _, err := s.Client.Transition(t.Context(), o.ID, "cancel"); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 20*time.Second, fmt.Sprint(total, " dead letters"), func() bool {
			l, err := s.Client.DeadLetters(t.Context(), 100, 0)
			all = l.DeadLetters
			return err == nil && len(all) == total
		})
	}
	failed := func(d api.DeadLetterJSON) time.Time { return apiTimeOf(t, d.FailedAt) }
	byFailed := slices.Clone(all)
	slices.SortFunc(byFailed, func(a, b api.DeadLetterJSON) int {
		return cmp.Or(failed(a).Compare(failed(b)), cmp.Compare(a.ID, b.ID))
	})
	want := func(q api.DeadLetterQuery) (out []int64) {
		list := all
		if !q.FailedAfter.IsZero() || !q.FailedBefore.IsZero() {
			list = byFailed
		}
		for _, d := range list {
			at := failed(d)
			if (q.WebhookID == 0 || d.WebhookID == q.WebhookID) && (q.EventType == "" || d.EventType == q.EventType) &&
				(q.FailedAfter.IsZero() || !at.Before(q.FailedAfter)) && (q.FailedBefore.IsZero() || at.Before(q.FailedBefore)) {
				out = append(out, d.ID)
			}
		}
		return out
	}
	for _, q := range []api.DeadLetterQuery{
		{WebhookID: created.ID},
		{WebhookID: every.ID},
		{EventType: "order.cancelled"},
		{EventType: "order.created", WebhookID: every.ID},
		{FailedAfter: failed(byFailed[3])},
		{FailedBefore: failed(byFailed[3])},
		{FailedAfter: failed(byFailed[1]), FailedBefore: failed(byFailed[5]), WebhookID: every.ID},
		{FailedAfter: failed(byFailed[0]), EventType: "order.created"},
	} {
		name := q.Values().Encode()
		w := want(q)
		if len(w) == 0 || len(w) == len(all) {
			t.Errorf("%s: the case selects %d of %d dead letters", name, len(w), len(all))
		}
		for _, limit := range []int{1, 2, 100} {
			q := q
			q.Limit = limit
			byTime := !q.FailedAfter.IsZero() || !q.FailedBefore.IsZero()
			got := pageIDs(t, s, "/v1/deadletters", "deadletters", q.Values(), byTime, len(all), func(after string) (int, string, error) {
				q.After = after
				p, err := s.Client.FindDeadLetters(t.Context(), q)
				return len(p.DeadLetters), p.Next, err
			})
			if !slices.Equal(got, w) {
				t.Errorf("%s limit %d: %v, want %v", name, limit, got, w)
			}
		}
	}
}

// TestFindDeadLettersBadInput: every parameter of GET /v1/deadletters
// refuses a bad value with 400 invalid_argument and a message naming it.
func TestFindDeadLettersBadInput(t *testing.T) {
	t.Parallel()
	s := startWebhookServer(t, "127.0.0.1", time.Second, time.Second, time.Second)
	checkBadQueries(t, s, "/v1/deadletters", []badQuery{
		{"webhook_id=abc", "webhook_id"},
		{"webhook_id=0", "webhook_id"},
		{"webhook_id=-3", "webhook_id"},
		{"event_type=order.lost", "event_type"},
		{"event_type=*", "event_type"},
		{"failed_after=now", "failed_after"},
		{"failed_before=2026-12-06T10:00:00+25:00", "failed_before"},
		{"after=x", "after"},
		{"failed_after=2026-12-06T10:00:00Z&after=7", "after"},
		{"failed_after=2026-12-06T10:00:00Z&after=failed_at:7", "after"},
		{"limit=0", "limit"},
		{"webhook=1", "webhook"},
	})
}
