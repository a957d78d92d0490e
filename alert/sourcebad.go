package alert

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// RuleSourceBadRows: a source (--sources) found, within the last 10
// minutes, a pending row whose key or deadline hourglass cannot close by
// (an infinity, a zero date, a key out of range): it skips the row, which
// stays open, and closes the others.
const RuleSourceBadRows = "source_bad_rows"

// sourceBadRowsRule is RuleSourceBadRows over src: its value is how many
// sources found such rows.
func sourceBadRowsRule(src SourceHealth) rule {
	var names []string
	return rule{
		name: RuleSourceBadRows,
		value: func(_ context.Context, now time.Time, _ Activity) (float64, error) {
			names = src.BadRows(now)
			return float64(len(names)), nil
		},
		summary: func(v float64) string {
			if v == 0 {
				return "every pending row of the sources has a key and deadline hourglass can close by"
			}
			return fmt.Sprintf("source %s has pending rows whose key or deadline cannot be read or lies out of range: they stay open, the other rows close; the log (one WARN a row), hourglass_source_bad_rows_total and the dashboard's Sources card name them", strings.Join(names, ", "))
		},
	}
}
