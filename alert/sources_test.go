package alert_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/hourglasstest"
)

// sourceHealth is misconfigured while names is not empty, and has bad
// rows while bad is not.
type sourceHealth struct{ names, bad []string }

func (s *sourceHealth) Misconfigured(time.Time) []string { return s.names }
func (s *sourceHealth) BadRows(time.Time) []string       { return s.bad }

// TestSourceMisconfigured: the rule fires while a source's guard matched
// several rows, naming it, and resolves when none did.
func TestSourceMisconfigured(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	h := &sourceHealth{}
	e, err := alert.New(alert.Config{Backlog: &fakeCounts{}, Activity: alert.NewRecorder(clock), Sources: h, Interval: -1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	status := func() alert.Status {
		for _, st := range e.Status() {
			if st.Rule == alert.RuleSourceMisconfigured {
				return st
			}
		}
		t.Fatalf("no %s rule", alert.RuleSourceMisconfigured)
		return alert.Status{}
	}
	e.Evaluate(context.Background())
	if status().Firing {
		t.Fatal("firing with every guard right")
	}
	h.names = []string{"shop_orders"}
	e.Evaluate(context.Background())
	if st := status(); !st.Firing || !strings.Contains(st.Summary, "shop_orders") {
		t.Fatalf("%+v; want firing, naming shop_orders", st)
	}
	h.names = nil
	e.Evaluate(context.Background())
	if status().Firing {
		t.Fatal("still firing once the guards are right")
	}
}

// TestSourceBadRows: the rule fires while a source found rows it skips,
// naming it, and resolves when none did.
func TestSourceBadRows(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	h := &sourceHealth{}
	e, err := alert.New(alert.Config{Backlog: &fakeCounts{}, Activity: alert.NewRecorder(clock), Sources: h, Interval: -1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	status := func() alert.Status {
		for _, st := range e.Status() {
			if st.Rule == alert.RuleSourceBadRows {
				return st
			}
		}
		t.Fatalf("no %s rule", alert.RuleSourceBadRows)
		return alert.Status{}
	}
	e.Evaluate(context.Background())
	if status().Firing {
		t.Fatal("firing without bad rows")
	}
	h.bad = []string{"shop_orders"}
	e.Evaluate(context.Background())
	if st := status(); !st.Firing || !strings.Contains(st.Summary, "shop_orders") {
		t.Fatalf("%+v; want firing, naming shop_orders", st)
	}
	h.bad = nil
	e.Evaluate(context.Background())
	if status().Firing {
		t.Fatal("still firing once the rows are fixed")
	}
}
