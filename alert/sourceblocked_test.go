package alert_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/hourglasstest"
)

// blockedRows reports rows while rows is not empty.
type blockedRows struct{ rows []string }

func (b *blockedRows) Blocked(time.Time) []string { return b.rows }

// TestSourceRowBlocked: the rule fires while a row is blocked past the
// bound, naming at most five, and resolves when none is.
func TestSourceRowBlocked(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	b := &blockedRows{}
	e, err := alert.New(alert.Config{Backlog: &fakeCounts{}, Activity: alert.NewRecorder(clock), BlockedRows: b, Interval: -1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	status := func() alert.Status {
		for _, st := range e.Status() {
			if st.Rule == alert.RuleSourceRowBlocked {
				return st
			}
		}
		t.Fatalf("no %s rule", alert.RuleSourceRowBlocked)
		return alert.Status{}
	}
	e.Evaluate(context.Background())
	if status().Firing {
		t.Fatal("firing with no row blocked")
	}
	for i := range 7 {
		b.rows = append(b.rows, fmt.Sprintf("source shop_orders key %d for 12s", 40+i))
	}
	e.Evaluate(context.Background())
	if st := status(); !st.Firing || st.Value != 7 || !strings.Contains(st.Summary, "key 40 for 12s") || strings.Contains(st.Summary, "key 46") || !strings.Contains(st.Summary, "and 2 more") {
		t.Fatalf("%+v; want firing at 7, naming the first five", st)
	}
	b.rows = nil
	e.Evaluate(context.Background())
	if status().Firing {
		t.Fatal("still firing once no row is blocked")
	}
}
