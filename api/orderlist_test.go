package api_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
)

// TestFindOrders: each filter of GET /v1/orders and their combinations,
// paged at several sizes, against what the created orders say; next is an
// id when the list is ordered by id, a cursor when by a time.
func TestFindOrders(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "book-1", "", 100)
	var all []api.OrderJSON
	for i, timeout := range []int{600, 650, 700, 750, 800, 700, 600} {
		user := []string{"alice", "bob"}[i%2]
		all = append(all, s.createOrder(t, fmt.Sprintf(`{"user_id":%q,"items":[{"sku":"book-1","quantity":1}],"timeout_ms":%d}`, user, timeout*1000)))
	}
	if _, err := s.Client.Pay(t.Context(), all[3].ID, "pay-3"); err != nil {
		t.Fatal(err)
	}
	all[3].Status = "paid"
	deadline := func(i int) time.Time { return apiTimeOf(t, all[i].Deadline) }
	created := func(i int) time.Time { return apiTimeOf(t, all[i].CreatedAt) }

	// want lists the orders that match, in the list's order: by id, or by
	// the time a range is on and then id.
	want := func(q api.OrderQuery) (out []int64) {
		in := func(at, from, before time.Time) bool {
			return (from.IsZero() || !at.Before(from)) && (before.IsZero() || at.Before(before))
		}
		var key func(api.OrderJSON) time.Time
		switch {
		case !q.DeadlineAfter.IsZero() || !q.DeadlineBefore.IsZero():
			key = func(o api.OrderJSON) time.Time { return apiTimeOf(t, o.Deadline) }
		case !q.CreatedAfter.IsZero() || !q.CreatedBefore.IsZero():
			key = func(o api.OrderJSON) time.Time { return apiTimeOf(t, o.CreatedAt) }
		}
		var match []api.OrderJSON
		for _, o := range all {
			if (q.Status == "" || o.Status == q.Status) && (q.UserID == "" || o.UserID == q.UserID) &&
				in(apiTimeOf(t, o.Deadline), q.DeadlineAfter, q.DeadlineBefore) && in(apiTimeOf(t, o.CreatedAt), q.CreatedAfter, q.CreatedBefore) {
				match = append(match, o)
			}
		}
		slices.SortFunc(match, func(a, b api.OrderJSON) int {
			if key == nil {
				return cmp.Compare(a.ID, b.ID)
			}
			return cmp.Or(key(a).Compare(key(b)), cmp.Compare(a.ID, b.ID))
		})
		for _, o := range match {
			out = append(out, o.ID)
		}
		return out
	}
	for _, q := range []api.OrderQuery{
		{UserID: "alice"},
		{UserID: "bob", Status: "paid"},
		{Status: "pending_payment"},
		{DeadlineAfter: deadline(2)},
		{DeadlineBefore: deadline(2)},
		{DeadlineAfter: deadline(1), DeadlineBefore: deadline(4)},
		{DeadlineAfter: deadline(1), Status: "pending_payment", UserID: "bob"},
		{CreatedAfter: created(2)},
		{CreatedBefore: created(4)},
		{CreatedAfter: created(1), CreatedBefore: created(5), UserID: "alice"},
		{CreatedAfter: created(1), DeadlineBefore: deadline(4)},
		{DeadlineAfter: deadline(3), DeadlineBefore: deadline(3)}, // empty
	} {
		name := q.Values().Encode()
		w := want(q)
		if len(w) == len(all) {
			t.Errorf("%s: the case selects every order", name)
		}
		for _, limit := range []int{1, 2, 1000} {
			q := q
			q.Limit = limit
			byTime := !q.DeadlineAfter.IsZero() || !q.DeadlineBefore.IsZero() || !q.CreatedAfter.IsZero() || !q.CreatedBefore.IsZero()
			got := pageIDs(t, s, "/v1/orders", "orders", q.Values(), byTime, len(all), func(after string) (int, string, error) {
				q.After = after
				p, err := s.Client.FindOrders(t.Context(), q)
				return len(p.Orders), p.Next, err
			})
			if !slices.Equal(got, w) {
				t.Errorf("%s limit %d: %v, want %v", name, limit, got, w)
			}
		}
	}
}

// TestFindOrdersBadInput: every parameter of GET /v1/orders refuses a bad
// value with 400 invalid_argument and a message naming it.
func TestFindOrdersBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	checkBadQueries(t, s, "/v1/orders", []badQuery{
		{"status=bogus", "status"},
		{"status=Paid", "status"},
		{"user_id=" + strings.Repeat("u", 129), "user_id"},
		{"user_id=a%00b", "user_id"},
		{"deadline_after=yesterday", "deadline_after"},
		{"deadline_after=2026-12-06", "deadline_after"},
		{"deadline_before=2026-13-01T00:00:00Z", "deadline_before"},
		{"created_after=1765015200000", "created_after"},
		{"created_before=1969-12-31T23:59:59Z", "created_before"},
		{"created_before=2026-12-06T10:00:00", "created_before"},
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"after=abc", "after"},
		{"after=-1", "after"},
		{"after=deadline:1:2", "after"}, // an id list takes an id
		{"deadline_after=2026-12-06T10:00:00Z&after=5", "after"},
		{"deadline_after=2026-12-06T10:00:00Z&after=created:1765015200000:5", "after"},
		{"created_after=2026-12-06T10:00:00Z&after=created:x:5", "after"},
		{"created_after=2026-12-06T10:00:00Z&after=created:1765015200000:0", "after"},
		{"created_after=2026-12-06T10:00:00Z&after=created:1765015200000", "after"},
		{"deadline=2026-12-06T10:00:00Z", "deadline"},
		{"status=paid&user=alice", "user"},
	})
}

// pageIDs walks the pages of GET path?v (field: the list's name in the
// body), after from each next, and returns the ids listed. It checks each
// next: a cursor string when byTime, else an id; and that client, given
// the same after, reads the same number of items and the same next.
func pageIDs(t *testing.T, s *testServer, path, field string, v url.Values, byTime bool, maxPages int,
	client func(after string) (int, string, error)) []int64 {
	t.Helper()
	var got []int64
	after := ""
	for pages := 0; ; pages++ {
		if pages > maxPages {
			t.Fatalf("%s?%s: next never ends", path, v.Encode())
		}
		v.Del("after")
		if after != "" {
			v.Set("after", after)
		}
		status, _, raw := s.call(t, http.MethodGet, path+"?"+v.Encode(), nil, nil)
		if status != http.StatusOK {
			t.Fatalf("%s?%s: status %d, body %s", path, v.Encode(), status, raw)
		}
		var l map[string]json.RawMessage
		var items []struct{ ID int64 }
		if err := json.Unmarshal(raw, &l); err != nil || json.Unmarshal(l[field], &items) != nil {
			t.Fatalf("%s?%s: body %s", path, v.Encode(), raw)
		}
		for _, it := range items {
			got = append(got, it.ID)
		}
		next := l["next"]
		if string(next) == "null" {
			return got
		}
		if isCursor := strings.HasPrefix(string(next), `"`); isCursor != byTime {
			t.Errorf("%s?%s: next %s; want a cursor string when ordered by a time, an id otherwise", path, v.Encode(), next)
		}
		n, clientNext, err := client(after)
		if err != nil || n != len(items) || clientNext != strings.Trim(string(next), `"`) {
			t.Errorf("%s?%s: the client read %d items, next %q, %v; want %d, %s", path, v.Encode(), n, clientNext, err, len(items), next)
		}
		after = clientNext
	}
}

// badQuery is a query a list refuses with 400 invalid_argument, and what
// its message must name.
type badQuery struct{ query, want string }

// checkBadQueries asserts each of cases on GET path.
func checkBadQueries(t *testing.T, s *testServer, path string, cases []badQuery) {
	t.Helper()
	for _, tt := range cases {
		status, _, raw := s.call(t, http.MethodGet, path+"?"+tt.query, nil, nil)
		checkError(t, tt.query, status, raw, http.StatusBadRequest, "invalid_argument")
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		json.Unmarshal(raw, &e)
		if !strings.Contains(e.Error.Message, tt.want) {
			t.Errorf("%s: message %q does not name %q", tt.query, e.Error.Message, tt.want)
		}
	}
}
