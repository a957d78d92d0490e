package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// orderListParams are GET /v1/orders' filters, beside limit and after.
var orderListParams = []string{"status", "user_id", "deadline_after", "deadline_before", "created_after", "created_before"}

// parseOrderFilter reads GET /v1/orders' filters from q: an empty value is
// no filter. Each time is RFC 3339; an _after bound includes its instant and
// a _before bound excludes it, so consecutive windows neither overlap nor
// leave a gap. Errors are invalid_argument, naming the parameter.
func parseOrderFilter(q url.Values) (hourglass.OrderFilter, error) {
	var f hourglass.OrderFilter
	if v := q.Get("status"); v != "" {
		st, err := hourglass.ParseState(v)
		if err != nil {
			return f, hourglass.Errorf(hourglass.CodeInvalidArgument, "status: %s", hourglass.ErrorMessage(err))
		}
		f.Status = st
	}
	if v := q.Get("user_id"); v != "" {
		if err := hourglass.ValidateUserID(v); err != nil {
			return f, err
		}
		f.UserID = v
	}
	for _, b := range []struct {
		name string
		to   *time.Time
	}{
		{"deadline_after", &f.DeadlineFrom},
		{"deadline_before", &f.DeadlineBefore},
		{"created_after", &f.CreatedFrom},
		{"created_before", &f.CreatedBefore},
	} {
		t, err := parseQueryTime(q, b.name)
		if err != nil {
			return f, err
		}
		*b.to = t
	}
	return f, nil
}

// parseQueryTime reads the RFC 3339 time of the query parameter name, or
// the zero time when it is absent or empty. Errors are invalid_argument,
// naming the parameter.
func parseQueryTime(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.Year() < 1970 {
		return time.Time{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: must be an RFC 3339 time from 1970 on, such as 2026-12-06T10:00:00Z, got %q", name, v)
	}
	return t, nil
}

// orderCursor is where a page of orders (or dead letters) starts: after
// the id, whose time in the list's order (its deadline, creation or failure
// time) is at.
type orderCursor struct {
	at time.Time
	id int64
}

// String is the cursor as a list ordered by sort returns it in next:
// "<sort>:<unix ms>:<id>", e.g. "deadline:1765015200000:42".
func (c orderCursor) String(sort hourglass.OrderSort) string {
	return timeCursor(sort.String(), c.at, c.id)
}

// timeCursor is the next of a list ordered by a time, named name, and then
// id: "<name>:<unix ms>:<id>".
func timeCursor(name string, at time.Time, id int64) string {
	return name + ":" + strconv.FormatInt(hourglass.UnixMilli(at), 10) + ":" + strconv.FormatInt(id, 10)
}

// parseOrderCursor reads after for a list ordered by a time (sort): the
// next of the previous page of that list. Absent or empty, the list starts
// at its beginning. Errors are invalid_argument, naming after.
func parseOrderCursor(sort hourglass.OrderSort, q url.Values) (orderCursor, error) {
	return parseTimeCursor(sort.String(), fmt.Sprintf("%s_after or %s_before", sort, sort), q.Get("after"))
}

// parseTimeCursor reads v, the after of a list ordered by the time name
// (which the parameters params set) and then id: a timeCursor. Empty, the
// list starts at its beginning. Errors are invalid_argument, naming after.
func parseTimeCursor(name, params, v string) (orderCursor, error) {
	if v == "" {
		return orderCursor{}, nil
	}
	rest, ok := strings.CutPrefix(v, name+":")
	msText, idText, ok2 := strings.Cut(rest, ":")
	ms, err1 := strconv.ParseInt(msText, 10, 64)
	id, err2 := strconv.ParseInt(idText, 10, 64)
	if !ok || !ok2 || err1 != nil || err2 != nil || ms < 0 || id < 1 {
		return orderCursor{}, hourglass.Errorf(hourglass.CodeInvalidArgument,
			"after: a list with %s is ordered by %s; pass the next of its previous page (%s:<ms>:<id>), got %q", params, name, name, v)
	}
	return orderCursor{at: hourglass.FromUnixMilli(ms), id: id}, nil
}

// OrderQuery is the query of GET /v1/orders: each field left zero is no
// filter (see docs/api.md). After is the Next of the previous page.
type OrderQuery struct {
	Status, UserID                string
	DeadlineAfter, DeadlineBefore time.Time // [after, before)
	CreatedAfter, CreatedBefore   time.Time // [after, before)
	Limit                         int
	After                         string
}

// Values is q as query parameters.
func (q OrderQuery) Values() url.Values {
	v := url.Values{}
	set := func(name, value string) {
		if value != "" {
			v.Set(name, value)
		}
	}
	at := func(name string, t time.Time) {
		if !t.IsZero() {
			v.Set(name, t.UTC().Format(time.RFC3339Nano))
		}
	}
	set("status", q.Status)
	set("user_id", q.UserID)
	at("deadline_after", q.DeadlineAfter)
	at("deadline_before", q.DeadlineBefore)
	at("created_after", q.CreatedAfter)
	at("created_before", q.CreatedBefore)
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	set("after", q.After)
	return v
}

// OrderPageJSON is a page of GET /v1/orders read by FindOrders. Next is the
// after of the next page ("" on the last): an id, or a cursor when the list
// is ordered by a time.
type OrderPageJSON struct {
	Orders []OrderJSON
	Next   string
}

// FindOrders returns one page of the orders q selects.
func (c *Client) FindOrders(ctx context.Context, q OrderQuery) (OrderPageJSON, error) {
	var l struct {
		Orders []OrderJSON      `json:"orders"`
		Next   *json.RawMessage `json:"next"`
	}
	if _, err := c.Do(ctx, http.MethodGet, "/v1/orders?"+q.Values().Encode(), nil, nil, &l); err != nil {
		return OrderPageJSON{}, err
	}
	return OrderPageJSON{Orders: l.Orders, Next: nextString(l.Next)}, nil
}

// nextString is a page's next as the after of the next page: a cursor
// string as it is, an id in decimal, "" for null (the last page).
func nextString(next *json.RawMessage) string {
	if next == nil {
		return ""
	}
	var s string
	if err := json.Unmarshal(*next, &s); err != nil { // an id
		return string(*next)
	}
	return s
}

// DeadLetterQuery is the query of GET /v1/deadletters: each field left zero
// is no filter (see docs/webhooks.md). After is the Next of the previous
// page.
type DeadLetterQuery struct {
	WebhookID                 int64
	EventType                 string
	FailedAfter, FailedBefore time.Time // [after, before)
	Limit                     int
	After                     string
}

// Values is q as query parameters.
func (q DeadLetterQuery) Values() url.Values {
	v := url.Values{}
	if q.WebhookID != 0 {
		v.Set("webhook_id", strconv.FormatInt(q.WebhookID, 10))
	}
	if q.EventType != "" {
		v.Set("event_type", q.EventType)
	}
	for name, t := range map[string]time.Time{"failed_after": q.FailedAfter, "failed_before": q.FailedBefore} {
		if !t.IsZero() {
			v.Set(name, t.UTC().Format(time.RFC3339Nano))
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	return v
}

// DeadLetterPageJSON is a page of GET /v1/deadletters read by
// FindDeadLetters. Next is the after of the next page ("" on the last): an
// id, or a cursor when the list is ordered by failure time.
type DeadLetterPageJSON struct {
	DeadLetters []DeadLetterJSON
	Next        string
}

// FindDeadLetters returns one page of the dead letters q selects.
func (c *Client) FindDeadLetters(ctx context.Context, q DeadLetterQuery) (DeadLetterPageJSON, error) {
	var l struct {
		DeadLetters []DeadLetterJSON `json:"deadletters"`
		Next        *json.RawMessage `json:"next"`
	}
	if _, err := c.Do(ctx, http.MethodGet, "/v1/deadletters?"+q.Values().Encode(), nil, nil, &l); err != nil {
		return DeadLetterPageJSON{}, err
	}
	return DeadLetterPageJSON{DeadLetters: l.DeadLetters, Next: nextString(l.Next)}, nil
}
