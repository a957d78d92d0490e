package alert

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// RuleEventSinkLag: an event sink (--event-sink) has events older than
// EventSinkLagAfter not on its bus yet: its broker is down or refuses
// them, or it publishes slower than events are written. The events wait in
// the database (pruning keeps them), so nothing is lost while it fires.
const RuleEventSinkLag = "event_sink_lag"

// EventSinkLagAfter is the lag above which RuleEventSinkLag fires.
const EventSinkLagAfter = time.Minute

// EventSinkLagSource is the event sinks' lag on this node: the largest age
// of an event read and not yet acknowledged by its broker, and the sink's
// redacted URL.
type EventSinkLagSource interface {
	MaxLag() (sink string, lag time.Duration)
}

// eventSinkRule is RuleEventSinkLag over src, in seconds.
func eventSinkRule(src EventSinkLagSource) rule {
	var worst atomic.Value // the sink of the last value, for its summary
	worst.Store("")
	return rule{
		name:      RuleEventSinkLag,
		threshold: EventSinkLagAfter.Seconds(),
		value: func(context.Context, time.Time, Activity) (float64, error) {
			sink, lag := src.MaxLag()
			worst.Store(sink)
			return lag.Seconds(), nil
		},
		summary: func(v float64) string {
			if v == 0 {
				return "every event sink is caught up"
			}
			return fmt.Sprintf("event sink %s has events %s old not on its bus (threshold %s): its broker is down or refuses them, or it cannot keep up; they wait in the database",
				worst.Load(), time.Duration(v*float64(time.Second)).Round(time.Second), EventSinkLagAfter)
		},
	}
}
