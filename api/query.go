package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/hourglass/hourglass"
)

// page is a list's paging query: at most limit items with ids after after.
type page struct {
	limit int
	after int64
}

// parsePage reads limit (1..max, default def) and after (an id >= 0, what
// names its kind in messages) from q, and refuses any parameter that is
// neither those two nor one of extra. Errors are invalid_argument.
func parsePage(q url.Values, what string, def, max int, extra ...string) (page, error) {
	known := append(extra, "limit", "after")
	for k := range q {
		if !slices.Contains(known, k) {
			return page{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "unknown query parameter %q (want %s)", k, strings.Join(known, ", "))
		}
	}
	p := page{limit: def}
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			return page{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be an integer from 1 to %d, got %q", max, v)
		}
		p.limit = n
	}
	if v := q.Get("after"); v != "" || q.Has("after") {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return page{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "after: must be a non-negative integer %s id, got %q", what, v)
		}
		p.after = n
	}
	return p, nil
}

// decodeEmpty accepts an empty body or an empty JSON object, for actions
// that take no input; anything else is invalid_argument.
func decodeEmpty(body []byte) error {
	var empty struct{}
	return decodeJSON(body, &empty, true)
}

// MaxPageBytes bounds the JSON of one list page, the newline included: a
// page ends before the item that would pass it (it always has one item,
// which fits: no item is near this size), with next set so the client
// pages on.
const MaxPageBytes = 4 << 20

// pageTail is room kept at the end of a page for `],"next":<cursor>}` and
// the newline: a cursor is an id or a timer key, escaped.
const pageTail = 2048

// pageBuilder writes a list page's JSON, {"<field>":[item,…],"next":…},
// item by item into a buffer held in the request's budget. Not safe for
// concurrent use.
type pageBuilder struct {
	r     *http.Request
	buf   heldBuffer
	items int
}

func newPage(r *http.Request, field string) *pageBuilder {
	p := &pageBuilder{r: r, buf: heldBuffer{h: holdOf(r)}}
	p.buf.b = append(p.buf.b, `{"`+field+`":[`...) // unheld until the first add: a few bytes
	return p
}

// add appends one item, encoded as the API encodes responses. It reports
// false, adding nothing, when the page is full: the item would take it past
// MaxPageBytes, or the budget has no room now for it to grow. The first
// item is always added, waiting up to BodyWait for room. Errors:
// unavailable (no room for the first item), internal (encoding).
func (p *pageBuilder) add(v any) (bool, error) {
	item, err := encodeValue(v)
	if err != nil {
		return false, fmt.Errorf("api: encoding a list item: %w", err)
	}
	n := len(item) + 1 // and its comma
	wait := BodyWait
	if p.items > 0 {
		if len(p.buf.b)+n+pageTail > MaxPageBytes {
			return false, nil
		}
		wait = 0
	}
	if !p.buf.ensure(p.r.Context(), n+pageTail, max(MaxPageBytes, len(p.buf.b)+n+pageTail), wait) {
		if p.items > 0 {
			return false, nil
		}
		return false, hourglass.Errorf(hourglass.CodeUnavailable, "too many responses in flight; retry shortly")
	}
	if p.items > 0 {
		p.buf.b = append(p.buf.b, ',')
	}
	p.buf.b = append(p.buf.b, item...)
	p.items++
	return true, nil
}

// finish closes the page with its next cursor (nil: the last page) and
// returns it, still held until written.
func (p *pageBuilder) finish(next any) (encodedJSON, error) {
	cursor, err := marshalJSON(next)
	if err != nil {
		return nil, fmt.Errorf("api: encoding a page's cursor: %w", err)
	}
	p.buf.b = append(p.buf.b, `],"next":`...)
	p.buf.b = append(p.buf.b, cursor...)
	p.buf.b = append(p.buf.b, "}\n"...)
	return encodedJSON(p.buf.b), nil
}

// fillPage adds up to limit items to p, in the store's order after the
// cursor after, fetching batch of them at a time (fetch gets one more than
// it needs, to know whether there is a next page), so a page of large items
// is never all in memory at once. It returns the cursor of the next page,
// or nil when the store has no more: a page ends at limit items or when p
// is full, whichever comes first. Errors are fetch's and p.add's.
func fillPage[T, C any](p *pageBuilder, limit, batch int, after C,
	fetch func(after C, n int) ([]T, error), render func(T) any, cursor func(T) C) (*C, error) {
	var last C
	count := 0
	for {
		want := min(limit-count, batch)
		items, err := fetch(after, want+1)
		if err != nil {
			return nil, err
		}
		for i, it := range items {
			if i == want { // one past this batch's share: there are more
				if count == limit {
					return &last, nil
				}
				break
			}
			ok, err := p.add(render(it))
			if err != nil {
				return nil, err
			}
			if !ok {
				return &last, nil
			}
			last, count = cursor(it), count+1
		}
		if len(items) <= want {
			return nil, nil
		}
		after = last
	}
}
