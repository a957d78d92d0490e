package alert

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// RuleSourceMisconfigured: the guard of a source (--sources) changed more
// than one row within the last 10 minutes; its closes are rolled back and
// its rows stay pending until the guard is fixed.
const RuleSourceMisconfigured = "source_misconfigured"

// SourceHealth says which sources are misconfigured now, and which found
// rows they skip (source.Runner).
type SourceHealth interface {
	Misconfigured(now time.Time) []string
	// BadRows returns the sources that found a pending row with a bad key
	// or deadline within the last 10 minutes.
	BadRows(now time.Time) []string
}

// sourceRule is RuleSourceMisconfigured over src: its value is how many
// sources are misconfigured.
func sourceRule(src SourceHealth) rule {
	var names []string
	return rule{
		name: RuleSourceMisconfigured,
		value: func(_ context.Context, now time.Time, _ Activity) (float64, error) {
			names = src.Misconfigured(now)
			return float64(len(names)), nil
		},
		summary: func(v float64) string {
			if v == 0 {
				return "every source's guard matches one row"
			}
			return fmt.Sprintf("the guard (close[0]) of source %s changed more than one row: those closes were rolled back and their rows stay pending; make the guard match one row by its key", strings.Join(names, ", "))
		},
	}
}
