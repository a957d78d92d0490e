package metrics

import (
	"github.com/hourglass/hourglass"
	"github.com/prometheus/client_golang/prometheus"
)

// reminderMetrics are the collectors of order reminders (issue #41),
// reported through Metrics.Reminded (engine.ReminderObserver).
type reminderMetrics struct {
	reminders *prometheus.CounterVec
	lateness  prometheus.Histogram
}

func newReminderMetrics(reg *prometheus.Registry) reminderMetrics {
	r := reminderMetrics{
		reminders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_reminders_total",
			Help: "Order reminders settled, by outcome: sent (order.expiring written) or skipped (due but never sent: the order was paid, cancelled or closed first, or its deadline passed too, as after a restart).",
		}, []string{"outcome"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_reminder_lateness_seconds",
			Help:    "Time from an order reminder's remind_at to the commit of its order.expiring (sent reminders only).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 3, 5, 10, 30, 60, 300},
		}),
	}
	reg.MustRegister(r.reminders, r.lateness)
	r.reminders.WithLabelValues("sent")
	r.reminders.WithLabelValues("skipped")
	return r
}

// Reminded implements engine.ReminderObserver.
func (m *Metrics) Reminded(r hourglass.RemindedOrder, _ bool) {
	if r.Skipped {
		m.reminders.reminders.WithLabelValues("skipped").Inc()
		return
	}
	m.reminders.reminders.WithLabelValues("sent").Inc()
	m.reminders.lateness.Observe(r.SentAt.Sub(r.RemindAt).Seconds())
}
