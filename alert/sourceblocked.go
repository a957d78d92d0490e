package alert

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// RuleSourceRowBlocked: a row of a source (--sources) has been kept from
// closing by another transaction's lock (the shop's) for longer than
// --source-blocked-alert; its close is retried until the lock is gone.
const RuleSourceRowBlocked = "source_row_blocked"

// BlockedRowSource says which source rows have been blocked longer than
// the bound now (source.Runner).
type BlockedRowSource interface {
	Blocked(now time.Time) []string
}

// maxNamedRows bounds the rows a summary names.
const maxNamedRows = 5

// blockedRule is RuleSourceRowBlocked over src: its value is how many rows
// are blocked past the bound.
func blockedRule(src BlockedRowSource) rule {
	var rows []string
	return rule{
		name: RuleSourceRowBlocked,
		value: func(_ context.Context, now time.Time, _ Activity) (float64, error) {
			rows = src.Blocked(now)
			return float64(len(rows)), nil
		},
		summary: func(v float64) string {
			if v == 0 {
				return "no source row is kept locked past --source-blocked-alert"
			}
			named := strings.Join(rows[:min(len(rows), maxNamedRows)], ", ")
			if len(rows) > maxNamedRows {
				named += fmt.Sprintf(" and %d more", len(rows)-maxNamedRows)
			}
			return fmt.Sprintf("%.0f source rows are kept from closing by another transaction's lock (%s): find the shop's transaction that holds them, or the stock rows their close statements change, open", v, named)
		},
	}
}
