package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestMetrics are the collectors of the timer requests applied from
// timer_requests (package requests reports through
// Metrics.TimerRequestsApplied).
type requestMetrics struct {
	applied  prometheus.Counter
	rejected prometheus.Counter
	lag      prometheus.Histogram
}

func newRequestMetrics(reg *prometheus.Registry) requestMetrics {
	r := requestMetrics{
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_timer_requests_applied_total",
			Help: "Timer requests (rows of timer_requests written in shops' transactions) applied by this node: arms and cancels.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_timer_requests_rejected_total",
			Help: "Timer requests this node could not apply and moved to timer_request_errors with their reason (GET /v1/timer-requests/rejected lists them).",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_timer_request_lag_seconds",
			Help:    "From a timer request's requested_at (its INSERT in the shop's transaction) to the commit that applied or rejected it, on the node that did.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
	reg.MustRegister(r.applied, r.rejected, r.lag)
	return r
}

// TimerRequestsApplied implements requests.Observer.
func (m *Metrics) TimerRequestsApplied(applied, rejected int, lags []time.Duration) {
	m.timerRequests.applied.Add(float64(applied))
	m.timerRequests.rejected.Add(float64(rejected))
	for _, d := range lags {
		m.timerRequests.lag.Observe(d.Seconds())
	}
}
