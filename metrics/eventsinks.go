package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// EventSinks are the collectors of the event sinks (--event-sink), labelled
// by the sink's redacted URL. It implements eventsink.Observer. Safe for
// concurrent use.
type EventSinks struct {
	published *prometheus.CounterVec
	failures  *prometheus.CounterVec
}

// EventSinks registers the event sinks' collectors on m's registry: for
// each sink (name → its lag, read at each scrape) the gauge
// hourglass_event_sink_lag_seconds{sink}, and the counters of events
// published and of failed publishes. Call it once per Metrics; it panics
// when called twice (the names are taken).
func (m *Metrics) EventSinks(lags map[string]func() time.Duration) *EventSinks {
	s := &EventSinks{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_event_sink_published_total",
			Help: "Events an event sink's broker acknowledged, by sink (its URL without the password). An event published again after a crash or an outage counts again.",
		}, []string{"sink"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_event_sink_failures_total",
			Help: "Failed publishes (or reads of the event log) of an event sink, each retried with backoff, by sink.",
		}, []string{"sink"}),
	}
	m.reg.MustRegister(s.published, s.failures)
	for name, lag := range lags {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "hourglass_event_sink_lag_seconds",
			Help:        "Age of the oldest event an event sink has read and its broker not yet acknowledged on this node (0 when caught up): it grows while the broker is down.",
			ConstLabels: prometheus.Labels{"sink": name},
		}, func() float64 { return lag().Seconds() }))
		s.published.WithLabelValues(name)
		s.failures.WithLabelValues(name)
	}
	return s
}

// EventsPublished implements eventsink.Observer.
func (s *EventSinks) EventsPublished(sink string, n int) {
	s.published.WithLabelValues(sink).Add(float64(n))
}

// EventSinkFailed implements eventsink.Observer.
func (s *EventSinks) EventSinkFailed(sink string) { s.failures.WithLabelValues(sink).Inc() }
