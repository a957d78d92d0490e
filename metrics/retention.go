package metrics

import "github.com/prometheus/client_golang/prometheus"

// retentionMetrics are the collectors of what package retention prunes and
// refuses (it reports through Metrics' Pruned, DeadLettersDropped,
// TimersStored and TimerRefused).
type retentionMetrics struct {
	pruned        *prometheus.CounterVec
	dropped       prometheus.Counter
	timers        prometheus.Gauge
	timersRefused prometheus.Counter
}

func newRetentionMetrics(reg *prometheus.Registry) retentionMetrics {
	r := retentionMetrics{
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_pruned_total",
			Help: "Rows deleted by retention on this node (the cluster's leader), by kind: idempotency_keys, timers, timer_events, events, cluster_nodes, timer_request_errors.",
		}, []string{"kind"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_dead_letters_dropped_total",
			Help: "Dead letters deleted, oldest first, because there were more than --dead-letter-max: deliveries that will never be retried.",
		}),
		timers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_timers_stored",
			Help: "Timers in the database, every status, as last counted for --timer-max.",
		}),
		timersRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_timers_refused_total",
			Help: "Timer creates refused with limit_exceeded because --timer-max timers existed.",
		}),
	}
	reg.MustRegister(r.pruned, r.dropped, r.timers, r.timersRefused)
	for _, kind := range []string{"idempotency_keys", "timers", "timer_events", "events", "cluster_nodes", "timer_request_errors", "delivery_attempts"} {
		r.pruned.WithLabelValues(kind)
	}
	return r
}

// Pruned implements retention.Observer.
func (m *Metrics) Pruned(kind string, n int) {
	if n > 0 {
		m.retention.pruned.WithLabelValues(kind).Add(float64(n))
	}
}

// DeadLettersDropped implements retention.Observer.
func (m *Metrics) DeadLettersDropped(n int) { m.retention.dropped.Add(float64(n)) }

// TimersStored implements retention.TimerObserver.
func (m *Metrics) TimersStored(n int64) { m.retention.timers.Set(float64(n)) }

// TimerRefused implements retention.TimerObserver.
func (m *Metrics) TimerRefused() { m.retention.timersRefused.Inc() }
