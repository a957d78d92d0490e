package source

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
)

// maxExtended bounds the extensions a source remembers.
const maxExtended = 100000

// PaymentCheck asks a source's before_close URL before closing a row,
// through the node's one beforeclose.Gate (which signs, times out, parses,
// keeps the failure bookkeeping for the before_close_failures alert and
// applies the answer policy orders share).
type PaymentCheck struct {
	Gate *beforeclose.Gate
}

// checkRequest is the body POSTed: {"source","key","deadline"}.
type checkRequest struct {
	Source   string `json:"source"`
	Key      int64  `json:"key"`
	Deadline string `json:"deadline"`
}

// Check implements Checker. close (not ""): the row may be closed now; otherwise
// retryAt is when to look at it again (zero: leave it to the sweeper,
// which asks again once it is overdue by the grace). row.At is the row's
// first deadline (the shop's column, before any extension).
//   - "close" closes it;
//   - "paid" leaves it: the shop's pay path marks it paid (hourglass does
//     not write the shop's rows but through the close statements);
//   - "extend" arms it again for the answer's deadline, at most
//     beforeclose.MaxExtension (7 days) after the row's first deadline,
//     and no sooner than the checker's step after a run of extends
//     (beforeclose.Checker.Extended);
//   - a failure, or an extend to a deadline (capped) not after now, is
//     retried with backoff (beforeclose.RetryMin doubling, RetryMax
//     apart); the row stays pending, or, with before_close_on_error:
//     close, is closed after before_close_max_failures failures in a row.
func (p PaymentCheck) Check(ctx context.Context, src hourglass.Source, row hourglass.DueItem) (hourglass.CloseCause, time.Time) {
	body, _ := json.Marshal(checkRequest{Source: src.Name, Key: row.ID, Deadline: row.At.UTC().Format(hourglass.TimeFormat)}) // cannot fail
	v := p.Gate.Check(ctx, beforeclose.Request{
		Key:     "source:" + src.Name + ":" + strconv.FormatInt(row.ID, 10),
		URL:     src.BeforeClose,
		Body:    body,
		Latest:  row.At.Add(beforeclose.MaxExtension),
		Policy:  beforeclose.Policy{OnError: src.BeforeCloseOnError, MaxFailures: src.BeforeCloseMaxFailures},
		Subject: "row",
		Attrs:   []any{"source", src.Name, "key", row.ID},
	})
	switch {
	case v.Close && v.Err != nil:
		return hourglass.CauseCheckFailed, time.Time{}
	case v.Close:
		return hourglass.CauseCheckClose, time.Time{}
	}
	return "", v.RetryAt
}

// FailingSince is the gate's (the before_close_failures alert).
func (p PaymentCheck) FailingSince() (time.Time, bool) { return p.Gate.FailingSince() }

// extensions remembers the rows a payment check extended or put off (by
// key: the row's first deadline and until when), so that neither the
// sweeper nor a reload closes them before, and so that each check is
// asked with the row's first deadline (the 7-day cap counts from it):
// the shop's row still holds it. An entry outlives its until while the
// row stays pending; it is dropped when the map is full and its until
// passed. Bounded; safe for concurrent use.
type extensions struct {
	mu sync.Mutex
	m  map[int64]extension
}

type extension struct{ first, until time.Time }

// set records that key (first due at first, unless an entry says
// earlier) is not to be closed before until.
func (e *extensions) set(key int64, first, until, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[int64]extension{}
	}
	if x, ok := e.m[key]; ok {
		e.m[key] = extension{first: x.first, until: until}
		return
	}
	if len(e.m) >= maxExtended {
		for k, x := range e.m {
			if x.until.Before(now) {
				delete(e.m, k)
			}
		}
		if len(e.m) >= maxExtended {
			return // the row is asked again when it falls due: no harm
		}
	}
	e.m[key] = extension{first: first, until: until}
}

// until returns when key's extension ends (zero: none, or ended by now).
func (e *extensions) until(key int64, now time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok || !x.until.After(now) {
		return time.Time{}
	}
	return x.until
}

// first returns key's first deadline, or at when none is recorded.
func (e *extensions) first(key int64, at time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		return x.first
	}
	return at
}

// forget drops key's entry: the row closed.
func (e *extensions) forget(key int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// AsksBeforeClose reports whether some source has a before_close.
func AsksBeforeClose(srcs []hourglass.Source) bool {
	return slices.ContainsFunc(srcs, func(s hourglass.Source) bool { return s.BeforeClose != "" })
}
