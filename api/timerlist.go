package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// TimerQuery is the query of GET /v1/timers: each field left zero is no
// filter (see docs/timers.md). After is the Next of the previous page.
type TimerQuery struct {
	Status, Prefix        string
	FireAfter, FireBefore time.Time // [after, before)
	Limit                 int
	After                 string
}

// Values is q as query parameters.
func (q TimerQuery) Values() url.Values {
	v := url.Values{}
	for name, value := range map[string]string{"status": q.Status, "prefix": q.Prefix, "after": q.After} {
		if value != "" {
			v.Set(name, value)
		}
	}
	for name, t := range map[string]time.Time{"fire_after": q.FireAfter, "fire_before": q.FireBefore} {
		if !t.IsZero() {
			v.Set(name, t.UTC().Format(time.RFC3339Nano))
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// FindTimers returns one page of the timers q selects.
func (c *Client) FindTimers(ctx context.Context, q TimerQuery) (TimerListJSON, error) {
	var l TimerListJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/timers?"+q.Values().Encode(), nil, nil, &l)
	return l, err
}
