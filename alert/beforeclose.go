package alert

import (
	"context"
	"fmt"
	"time"
)

// RuleBeforeCloseFailures: the payment check before a close
// (--before-close-url) has been failing without a break for longer than
// BeforeCloseFailuresAfter: orders stay pending past their deadline (with
// --before-close-on-error wait, none closes until a check answers).
const RuleBeforeCloseFailures = "before_close_failures"

// BeforeCloseFailuresAfter is how long the checks of some order must have
// failed in a row before RuleBeforeCloseFailures fires.
const BeforeCloseFailuresAfter = time.Minute

// FailureSource says since when some checks have been failing without a
// break (beforeclose.Checker.FailingSince); ok is false while none is.
type FailureSource interface {
	FailingSince() (since time.Time, ok bool)
}

// beforeCloseRule is RuleBeforeCloseFailures over src: its value is how
// long, in seconds, the oldest ongoing run of failed checks has lasted.
func beforeCloseRule(src FailureSource) rule {
	return rule{
		name:      RuleBeforeCloseFailures,
		threshold: BeforeCloseFailuresAfter.Seconds(),
		value: func(_ context.Context, now time.Time, _ Activity) (float64, error) {
			since, ok := src.FailingSince()
			if !ok {
				return 0, nil
			}
			return max(now.Sub(since), 0).Seconds(), nil
		},
		summary: func(v float64) string {
			if v == 0 {
				return "payment checks before closes answer"
			}
			return fmt.Sprintf("payment checks before closes (--before-close-url) have failed for %s without an answer (threshold %s): the orders they hold stay pending past their deadline",
				time.Duration(v*float64(time.Second)).Round(time.Second), BeforeCloseFailuresAfter)
		},
	}
}
