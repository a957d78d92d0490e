package alert_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestBeforeCloseFailures: the before_close_failures rule reads a real
// beforeclose.Checker on the fake clock: an order whose checks keep
// failing (a receiver that times out every 2 s, retried up to 5 s apart)
// fires the rule once the failures have gone on for more than a minute,
// and it resolves when a check answers.
func TestBeforeCloseFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	checker, err := beforeclose.New(beforeclose.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	e, err := alert.New(alert.Config{Backlog: &fakeCounts{}, Activity: alert.NewRecorder(clock), BeforeClose: checker, Interval: -1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	firing := func() bool {
		for _, st := range e.Status() {
			if st.Rule == alert.RuleBeforeCloseFailures {
				return st.Firing
			}
		}
		t.Fatalf("no %s rule in %+v", alert.RuleBeforeCloseFailures, e.Status())
		return false
	}
	e.Evaluate(ctx)
	if firing() {
		t.Fatal("firing with no failure")
	}
	// Each failed check takes its 2 s timeout, then waits its backoff.
	start := clock.Now()
	for clock.Now().Sub(start) <= alert.BeforeCloseFailuresAfter {
		clock.Advance(beforeclose.TimeoutDefault)
		_, wait := checker.Failed("42")
		e.Evaluate(ctx)
		if clock.Now().Sub(start) <= alert.BeforeCloseFailuresAfter && firing() {
			t.Fatalf("firing after %v of failures", clock.Now().Sub(start))
		}
		clock.Advance(wait)
	}
	clock.Advance(beforeclose.TimeoutDefault)
	checker.Failed("42")
	e.Evaluate(ctx)
	if !firing() {
		t.Fatalf("not firing after %v of failures", clock.Now().Sub(start))
	}
	checker.Succeeded("42")
	e.Evaluate(ctx)
	if firing() {
		t.Fatal("still firing once the check answered")
	}
}
