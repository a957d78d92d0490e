package api_test

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
)

// TestFindTimers: each filter of GET /v1/timers and their combinations,
// paged at several sizes, against what the armed timers say; next is a key
// when the list is by key, a fire_at cursor when by fire time.
func TestFindTimers(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	base := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	var all []api.TimerJSON
	for i := range 12 {
		key := fmt.Sprintf("%s%02d", []string{"coupon:", "coupon-", "seat:"}[i%3], i)
		all = append(all, s.armTimer(t, key, fmt.Sprintf(`{"fire_at":%q}`, base.Add(time.Duration(i%5)*time.Minute).Format(time.RFC3339Nano)), http.StatusCreated))
	}
	for _, i := range []int{0, 4, 7} {
		all[i] = s.cancelTimer(t, all[i].Key)
	}
	fireAt := func(tm api.TimerJSON) time.Time { return apiTimeOf(t, tm.FireAt) }
	want := func(q api.TimerQuery) (out []string) {
		var match []api.TimerJSON
		for _, tm := range all {
			at := fireAt(tm)
			if (q.Status == "" || tm.Status == q.Status) && strings.HasPrefix(tm.Key, q.Prefix) &&
				(q.FireAfter.IsZero() || !at.Before(q.FireAfter)) && (q.FireBefore.IsZero() || at.Before(q.FireBefore)) {
				match = append(match, tm)
			}
		}
		byFire := !q.FireAfter.IsZero() || !q.FireBefore.IsZero()
		// By fire time, ties in the order armed (the internal id's).
		armed := func(tm api.TimerJSON) int {
			return slices.IndexFunc(all, func(o api.TimerJSON) bool { return o.Key == tm.Key })
		}
		slices.SortFunc(match, func(a, b api.TimerJSON) int {
			if byFire {
				return cmp.Or(fireAt(a).Compare(fireAt(b)), cmp.Compare(armed(a), armed(b)))
			}
			return strings.Compare(a.Key, b.Key)
		})
		for _, tm := range match {
			out = append(out, tm.Key)
		}
		return out
	}
	for _, q := range []api.TimerQuery{
		{Prefix: "coupon:"},
		{Prefix: "coupon", Status: "scheduled"},
		{FireAfter: base.Add(2 * time.Minute)},
		{FireBefore: base.Add(2 * time.Minute)},
		{FireAfter: base.Add(time.Minute), FireBefore: base.Add(3 * time.Minute), Status: "scheduled"},
		{FireAfter: base.Add(time.Minute), Prefix: "seat:"},
		{FireAfter: base, Status: "cancelled"},
	} {
		name := q.Values().Encode()
		w := want(q)
		if len(w) == 0 || len(w) == len(all) {
			t.Errorf("%s: the case selects %d of %d timers", name, len(w), len(all))
		}
		for _, limit := range []int{1, 2, 1000} {
			var got []string
			q := q
			q.Limit = limit
			for pages := 0; ; pages++ {
				if pages > len(all) {
					t.Fatalf("%s limit %d: next never ends", name, limit)
				}
				l, err := s.Client.FindTimers(t.Context(), q)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, tm := range l.Timers {
					got = append(got, tm.Key)
				}
				if l.Next == nil {
					break
				}
				if byFire := !q.FireAfter.IsZero() || !q.FireBefore.IsZero(); byFire != strings.HasPrefix(*l.Next, "fire_at:") {
					t.Errorf("%s: next %q; want a fire_at cursor when ordered by fire time, a key otherwise", name, *l.Next)
				}
				q.After = *l.Next
			}
			if !slices.Equal(got, w) {
				t.Errorf("%s limit %d: %v, want %v", name, limit, got, w)
			}
		}
	}
}

// TestFindTimersBadInput: every parameter of GET /v1/timers refuses a bad
// value with 400 invalid_argument and a message naming it.
func TestFindTimersBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	checkBadQueries(t, s, "/v1/timers", []badQuery{
		{"prefix=a%20b", "prefix"},
		{"prefix=" + strings.Repeat("p", 201), "prefix"},
		{"prefix=coupon/", "prefix"},
		{"fire_after=tomorrow", "fire_after"},
		{"fire_before=2026-12-06T25:00:00Z", "fire_before"},
		{"fire_before=1969-01-01T00:00:00Z", "fire_before"},
		{"fire_after=2026-12-06T10:00:00Z&after=coupon:1", "after"},
		{"fire_after=2026-12-06T10:00:00Z&after=fire_at:x:1", "after"},
		{"fire_after=2026-12-06T10:00:00Z&after=fire_at:1", "after"},
		{"status=scheduled&fire=2026-12-06T10:00:00Z", "fire"},
	})
}
