package source

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
)

// checkConcurrency is how many payment checks of one source run at once.
const checkConcurrency = 32

// maxFailuresDefault is before_close_max_failures' default.
const maxFailuresDefault = 10

// maxExtended bounds the extensions a source remembers.
const maxExtended = 100000

// PaymentCheck asks a source's before_close URL before closing a row,
// with the node's one beforeclose.Checker (which signs, times out, parses
// and counts failures for the before_close_failures alert).
type PaymentCheck struct {
	Checker *beforeclose.Checker
	Clock   hourglass.Clock
	Logger  *slog.Logger
}

// checkRequest is the body POSTed: {"source","key","deadline"}.
type checkRequest struct {
	Source   string `json:"source"`
	Key      int64  `json:"key"`
	Deadline string `json:"deadline"`
}

// Check implements Checker. close: the row may be closed now; otherwise
// retryAt is when to look at it again (zero: leave it to the sweeper,
// which asks again once it is overdue by the grace).
//   - "close" closes it;
//   - "paid" leaves it: the shop's pay path marks it paid (hourglass does
//     not write the shop's rows but through the close statements);
//   - "extend" arms it again for the answer's deadline, at most 7 days
//     after the row's deadline;
//   - a failure is retried with backoff (100 ms doubling, 5 s apart); the
//     row stays pending, or, with before_close_on_error: close, is closed
//     after before_close_max_failures failures in a row.
func (p PaymentCheck) Check(ctx context.Context, src hourglass.Source, row hourglass.DueItem) (bool, time.Time) {
	body, _ := json.Marshal(checkRequest{Source: src.Name, Key: row.ID, Deadline: row.At.UTC().Format(hourglass.TimeFormat)}) // cannot fail
	key := "source:" + src.Name + ":" + strconv.FormatInt(row.ID, 10)
	a, err := p.Checker.Ask(ctx, src.BeforeClose, body)
	now := p.Clock.Now()
	if err != nil {
		n, retryIn := p.Checker.Failed(key)
		if src.BeforeCloseOnError == "close" && n >= cmp.Or(src.BeforeCloseMaxFailures, maxFailuresDefault) {
			p.Logger.Warn("source: payment check failed too often; closing as before_close_on_error: close says", "source", src.Name, "key", row.ID, "failures", n, "err", err)
			p.Checker.Succeeded(key)
			return true, time.Time{}
		}
		level := slog.LevelDebug
		if n == 1 || n%10 == 0 {
			level = slog.LevelWarn
		}
		p.Logger.Log(ctx, level, "source: payment check failed; the row stays pending and is checked again", "source", src.Name, "key", row.ID, "failures", n, "retry_in", retryIn, "err", err)
		return false, now.Add(retryIn)
	}
	p.Checker.Succeeded(key)
	switch a.Action {
	case beforeclose.ActionClose:
		return true, time.Time{}
	case beforeclose.ActionExtend:
		limit := row.At.Add(7 * 24 * time.Hour)
		if a.Deadline.After(limit) {
			p.Logger.Warn("source: payment check extended past 7 days; capped", "source", src.Name, "key", row.ID, "deadline", a.Deadline)
			return false, limit
		}
		return false, a.Deadline
	default: // paid
		return false, time.Time{}
	}
}

// FailingSince is the checker's (the before_close_failures alert).
func (p PaymentCheck) FailingSince() (time.Time, bool) { return p.Checker.FailingSince() }

// extensions remembers the rows a payment check extended (by key, until
// when), so that neither the sweeper nor a reload closes them before:
// the shop's row still holds the old deadline. Bounded; safe for
// concurrent use.
type extensions struct {
	mu sync.Mutex
	m  map[int64]time.Time
}

func (e *extensions) set(key int64, until, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[int64]time.Time{}
	}
	if len(e.m) >= maxExtended {
		for k, u := range e.m {
			if u.Before(now) {
				delete(e.m, k)
			}
		}
		if len(e.m) >= maxExtended {
			return // the row is asked again when it falls due: no harm
		}
	}
	e.m[key] = until
}

// until returns when key's extension ends (zero: none, or ended by now).
func (e *extensions) until(key int64, now time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	u, ok := e.m[key]
	if !ok {
		return time.Time{}
	}
	if !u.After(now) {
		delete(e.m, key)
		return time.Time{}
	}
	return u
}

// AsksBeforeClose reports whether some source has a before_close.
func AsksBeforeClose(srcs []hourglass.Source) bool {
	return slices.ContainsFunc(srcs, func(s hourglass.Source) bool { return s.BeforeClose != "" })
}
