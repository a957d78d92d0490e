package api

import (
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

// trimPage cuts items, fetched with limit+1, to limit and returns the
// cursor of the next page: the last kept item's id, or nil on the last page.
func trimPage[T any](items []T, limit int, id func(T) int64) ([]T, *int64) {
	if len(items) <= limit {
		return items, nil
	}
	items = items[:limit]
	next := id(items[limit-1])
	return items, &next
}

// decodeEmpty accepts an empty body or an empty JSON object, for actions
// that take no input; anything else is invalid_argument.
func decodeEmpty(body []byte) error {
	var empty struct{}
	return decodeJSON(body, &empty, true)
}
