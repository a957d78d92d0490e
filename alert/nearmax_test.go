package alert_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass/alert"
)

// TestDeadLettersNearMax: the rule fires above 90% of the maximum, before
// retention drops any dead letter, and is left out without a maximum.
func TestDeadLettersNearMax(t *testing.T) {
	t.Parallel()
	counts := &fakeCounts{}
	ev, err := alert.New(alert.Config{Backlog: counts, Activity: alert.NewRecorder(nil), DeadLetters: counts, Interval: -1,
		Thresholds: alert.Thresholds{DeadLetters: 1 << 30, DeadLetterMax: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	firing := func() bool {
		t.Helper()
		for _, s := range ev.Status() {
			if s.Rule == alert.RuleDeadLettersNearMax {
				return s.Firing
			}
		}
		t.Fatalf("no %s rule in %v", alert.RuleDeadLettersNearMax, ev.Rules())
		return false
	}
	for _, tc := range []struct {
		dead int
		want bool
	}{{0, false}, {900, false}, {901, true}, {1000, true}, {899, false}} {
		counts.set(func(f *fakeCounts) { f.deadLetters = tc.dead })
		ev.Evaluate(context.Background())
		if got := firing(); got != tc.want {
			t.Errorf("%d dead letters of 1000: firing %v, want %v", tc.dead, got, tc.want)
		}
	}

	ev, err = alert.New(alert.Config{Backlog: counts, Activity: alert.NewRecorder(nil), DeadLetters: counts})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ev.Rules() {
		if r == alert.RuleDeadLettersNearMax {
			t.Errorf("rule %s without a DeadLetterMax", r)
		}
	}
	if _, err := alert.New(alert.Config{Backlog: counts, Activity: alert.NewRecorder(nil), DeadLetters: counts, Thresholds: alert.Thresholds{DeadLetterMax: -1}}); err == nil {
		t.Error("New with a negative DeadLetterMax: no error")
	}
}
