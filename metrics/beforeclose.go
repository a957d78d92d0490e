package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// beforeCloseMetrics are the collectors of the payment check before a
// close (package beforeclose reports through Metrics.ObserveBeforeClose).
type beforeCloseMetrics struct {
	calls   *prometheus.CounterVec
	seconds prometheus.Histogram
}

func newBeforeCloseMetrics(reg *prometheus.Registry) beforeCloseMetrics {
	b := beforeCloseMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_before_close_calls_total",
			Help: "Payment checks before a close (--before-close-url), by answer: close, paid, extend, error (no valid answer) or extend_invalid (an extend to a deadline, capped at 7 days, not after now); the last two are failed checks, retried with backoff while the order stays pending.",
		}, []string{"answer"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_before_close_seconds",
			Help:    "Time from a payment check's request to its answer (or its failure; 2 s is the timeout).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2, 2.5, 5},
		}),
	}
	reg.MustRegister(b.calls, b.seconds)
	for _, answer := range []string{"close", "paid", "extend", "error", "extend_invalid"} {
		b.calls.WithLabelValues(answer)
	}
	return b
}

// ObserveBeforeClose implements beforeclose.Observer.
func (m *Metrics) ObserveBeforeClose(answer string, took time.Duration) {
	m.beforeClose.calls.WithLabelValues(answer).Inc()
	m.beforeClose.seconds.Observe(took.Seconds())
}
