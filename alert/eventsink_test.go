package alert_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/alert"
)

type sinkLag struct{ lag time.Duration }

func (s *sinkLag) MaxLag() (string, time.Duration) { return "kafka://k:9092/orders", s.lag }

type noBacklog struct{}

func (noBacklog) CountPendingDue(context.Context, time.Time, int) (int, error) { return 0, nil }

// TestEventSinkLag: the rule fires once a sink lags more than a minute,
// names the sink, and resolves when it drains.
func TestEventSinkLag(t *testing.T) {
	src := &sinkLag{}
	rec := alert.NewRecorder(nil)
	ev, err := alert.New(alert.Config{Backlog: noBacklog{}, Activity: rec, EventSinks: src, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	status := func() alert.Status {
		ev.Evaluate(context.Background())
		for _, s := range ev.Status() {
			if s.Rule == alert.RuleEventSinkLag {
				return s
			}
		}
		t.Fatalf("no %s rule among %v", alert.RuleEventSinkLag, ev.Rules())
		return alert.Status{}
	}
	if s := status(); s.Firing {
		t.Errorf("fires with no lag: %+v", s)
	}
	src.lag = 90 * time.Second
	s := status()
	if !s.Firing || !strings.Contains(s.Summary, "kafka://k:9092/orders") {
		t.Errorf("a 90 s lag: %+v, want firing naming the sink", s)
	}
	src.lag = 0
	if s := status(); s.Firing {
		t.Errorf("fires after the lag drained: %+v", s)
	}
}
