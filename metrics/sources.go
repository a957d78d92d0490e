package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sourceMetrics are the collectors of the shops' own tables (package
// source reports through Metrics' Source* methods), each by source name.
type sourceMetrics struct {
	closed, noops, guardErrors, failed, recovered *prometheus.CounterVec
	lockWaits                                     *prometheus.CounterVec
	lateness                                      *prometheus.HistogramVec
	held                                          *prometheus.GaugeVec
	badRows                                       *prometheus.CounterVec
	reminders                                     *prometheus.CounterVec
}

func newSourceMetrics(reg *prometheus.Registry) sourceMetrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"source"})
	}
	s := sourceMetrics{
		closed:      counter("hourglass_source_closes_total", "Rows of a source this node closed: the guard changed one row, the other statements ran and the source.closed event was written."),
		noops:       counter("hourglass_source_noops_total", "Closes whose guard changed no row: the row was paid, cancelled or moved meanwhile, or extended (then armed again)."),
		guardErrors: counter("hourglass_source_guard_errors_total", "Closes whose guard changed more than one row: rolled back, the source is misconfigured."),
		failed:      counter("hourglass_source_close_errors_total", "Closes of a row rolled back because one of its statements failed; retried."),
		recovered:   counter("hourglass_source_sweeper_recovered_total", "Rows the sweeper found past their deadline and grace, which the timing wheel had not closed."),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hourglass_source_close_lateness_seconds",
			Help:    "From a row's deadline to the database's time of its close.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hourglass_source_window_rows",
			Help: "Rows of a source held in memory: pending and due within the window, or being closed.",
		}, []string{"source"}),
	}
	s.badRows = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_source_bad_rows_total",
		Help: "Pending rows of a source skipped because their key or deadline cannot be read or lies out of range, each counted once when found, by reason."},
		[]string{"source", "reason"})
	s.lockWaits = counter("hourglass_source_lock_waits_total", "Closes of a row that met a lock another transaction (the shop's) held: the row was left out of its batch, the others closed, and it is retried alone.")
	s.reminders = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_source_reminders_total",
		Help: "Reminders of a source's rows (remind_before) settled, by outcome: sent (source.expiring written) or skipped (due but never sent: the row was no longer pending, or its deadline had passed too, as after a restart)."},
		[]string{"source", "outcome"})
	reg.MustRegister(s.closed, s.noops, s.guardErrors, s.failed, s.recovered, s.lateness, s.held, s.badRows, s.lockWaits, s.reminders)
	return s
}

// SourceClosed implements source.Observer.
func (m *Metrics) SourceClosed(source string, lateness time.Duration) {
	m.sources.closed.WithLabelValues(source).Inc()
	m.sources.lateness.WithLabelValues(source).Observe(max(lateness, 0).Seconds())
}

// SourceNoop implements source.Observer.
func (m *Metrics) SourceNoop(source string) { m.sources.noops.WithLabelValues(source).Inc() }

// SourceGuardError implements source.Observer.
func (m *Metrics) SourceGuardError(source string) {
	m.sources.guardErrors.WithLabelValues(source).Inc()
}

// SourceFailed implements source.Observer.
func (m *Metrics) SourceFailed(source string) { m.sources.failed.WithLabelValues(source).Inc() }

// SourceRecovered implements source.Observer.
func (m *Metrics) SourceRecovered(source string, n int) {
	m.sources.recovered.WithLabelValues(source).Add(float64(n))
}

// SourceBadRows implements source.Observer.
func (m *Metrics) SourceBadRows(source, reason string, n int) {
	m.sources.badRows.WithLabelValues(source, reason).Add(float64(n))
}

// SourceHeld implements source.Observer.
func (m *Metrics) SourceHeld(source string, n int) {
	m.sources.held.WithLabelValues(source).Set(float64(n))
}

// SourceLockWaits implements source.Observer: n 0 makes the source's
// series exist (at zero) before its first lock wait.
func (m *Metrics) SourceLockWaits(source string, n int) {
	m.sources.lockWaits.WithLabelValues(source).Add(float64(n))
}

// SourceReminders implements source.Observer: n 0 makes the outcome's
// series exist (at zero) before it first counts.
func (m *Metrics) SourceReminders(source, outcome string, n int) {
	m.sources.reminders.WithLabelValues(source, outcome).Add(float64(n))
}

// SourceConfigured makes every metric of the source named appear at zero,
// so that /metrics shows it (and a rate or an alert on it has a series)
// before it first counts. Safe for concurrent use; idempotent.
func (m *Metrics) SourceConfigured(source string) {
	for _, v := range []*prometheus.CounterVec{m.sources.closed, m.sources.noops, m.sources.guardErrors, m.sources.failed, m.sources.recovered, m.sources.lockWaits} {
		v.WithLabelValues(source)
	}
	m.sources.lateness.WithLabelValues(source)
	m.sources.held.WithLabelValues(source)
}
