package source

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
)

// RowsReadTimeout bounds one read of a source's pending rows for the API:
// the shop's table is not hourglass's, and a list must not hold a
// connection to it for long.
const RowsReadTimeout = 5 * time.Second

// HasSource reports whether name is one of the runner's sources (the API's
// source rows routes answer 404 for any other). Safe for concurrent use.
func (r *Runner) HasSource(name string) bool {
	return r.source(name) != nil
}

// PendingRows returns up to p.Limit pending rows of the source name with
// a deadline at or before p.Until, strictly after the cursor (p.After,
// p.AfterID) in (deadline, key) order: the due scan's own read (the
// source's pending condition, its deadline index, a row whose key or
// deadline cannot be read left out and counted among its bad rows),
// bounded by RowsReadTimeout. ok is false for an unknown source. Safe for
// concurrent use.
func (r *Runner) PendingRows(ctx context.Context, name string, p hourglass.PendingDueParams) (rows []hourglass.DueItem, ok bool, err error) {
	s := r.source(name)
	if s == nil {
		return nil, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, RowsReadTimeout)
	defer cancel()
	p.Parts = nil
	rows, err = s.table.Due(ctx, p)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		return nil, true, hourglass.Errorf(hourglass.CodeUnavailable, "source %s: reading pending rows took over %s; narrow the deadline range", name, RowsReadTimeout)
	}
	if err != nil {
		return nil, true, fmt.Errorf("source %s: pending rows: %w", name, err)
	}
	return rows, true, nil
}

// source returns the runner of the source name, or nil.
func (r *Runner) source(name string) *runner {
	for _, s := range r.srcs {
		if s.src.Name == name {
			return s
		}
	}
	return nil
}
