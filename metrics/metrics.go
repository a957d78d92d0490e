// Package metrics exposes hourglass's Prometheus metrics. It is the only
// package that imports the Prometheus client; everything else reports
// through small interfaces (engine.Observer, the API's request observer).
package metrics

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the collectors, registered on its own registry (no globals).
// It is safe for concurrent use.
type Metrics struct {
	reg            *prometheus.Registry
	closeLateness  prometheus.Histogram
	closed         *prometheus.CounterVec
	fireLateness   prometheus.Histogram
	fired          *prometheus.CounterVec
	closeFailures  prometheus.Counter
	sweeperFound   prometheus.Counter
	sweeperRecover prometheus.Counter
	stale          prometheus.Counter
	schedFailures  prometheus.Counter
	requests       *prometheus.CounterVec
	requestLatency *prometheus.HistogramVec
	commitWrites   prometheus.Histogram
	commitLatency  prometheus.Histogram
	dbRetries      *prometheus.CounterVec
	alertsFiring   *prometheus.GaugeVec
	closeBacklog   prometheus.Gauge
	deadLetters    prometheus.Gauge
	bulkRunning    prometheus.Gauge
	deliveries     *prometheus.CounterVec
	deliveryLag    prometheus.Histogram
	fanoutPending  prometheus.Gauge
	cluster        clusterMetrics
	retention      retentionMetrics
	timerRequests  requestMetrics
	beforeClose    beforeCloseMetrics
	sources        sourceMetrics
	// noticesRejected is hourglass_notices_rejected_total (notices.go).
	noticesRejected *prometheus.CounterVec
	// reminders are order reminders' (reminders.go).
	reminders reminderMetrics
	// requestSeries holds each route, method and code's series of
	// requests and requestLatency once bound (requestKey →
	// *requestSeries). The API's labels come from fixed sets, so it is as
	// bounded as the series are.
	requestSeries sync.Map
}

// New registers every collector on a new registry. pending reports the
// number of timers the engine holds in memory.
func New(pending func() int) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		closeLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hourglass_close_lateness_seconds",
			Help: "Time from an order's deadline to the commit of its close (closed_at - deadline).",
			// 3 s is the default alert threshold on p99 (alert.LatenessBounds
			// holds the same bounds).
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 3, 5, 10, 30, 60, 300},
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_orders_closed_total",
			Help: "Orders closed because their deadline passed, by the component that closed them: the delay mechanism (scheduler) or the compensation sweeper.",
		}, []string{"by"}),
		fireLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_timer_fire_lateness_seconds",
			Help:    "Time from a client timer's fire_at to the commit of its fire (fired_at - fire_at).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 3, 5, 10, 30, 60, 300},
		}),
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_timers_fired_total",
			Help: "Client timers fired, by the component that fired them: the delay mechanism (scheduler) or the compensation sweeper.",
		}, []string{"by"}),
		closeFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_close_failures_total",
			Help: "Orders whose close call failed and was retried.",
		}),
		sweeperFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_sweeper_found_total",
			Help: "Overdue pending orders found by the compensation sweeper (including start-up recovery).",
		}),
		sweeperRecover: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_sweeper_recovered_total",
			Help: "Orders closed by the compensation sweeper (including start-up recovery) rather than by the wheel.",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_close_noops_total",
			Help: "Delivered timers whose close changed nothing: the order was already paid, cancelled or closed (stale or duplicate timers).",
		}),
		schedFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_scheduler_failures_total",
			Help: "Failures of the delay mechanism (its run loop or the outbox relay); each is retried with backoff.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_http_requests_total",
			Help: "API requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		requestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hourglass_http_request_duration_seconds",
			Help:    "API request latency by route and method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method"}),
		commitWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_store_commit_writes",
			Help:    "Writes group-committed per database transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_store_commit_seconds",
			Help:    "Duration of a group commit, execution and fsync included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		dbRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_db_retries_total",
			Help: "Database transactions run again after losing a race, by reason: deadlock (chosen as a deadlock victim; on Galera also aborted by a conflicting write replicated from another node), certification (Galera: lost certification at COMMIT to another node's write), serialization, lock_timeout, duplicate_key.",
		}, []string{"reason"}),
		alertsFiring: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hourglass_alerts_firing",
			Help: "1 while the built-in alert rule is firing, 0 otherwise.",
		}, []string{"rule"}),
		closeBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_close_backlog",
			Help: "Pending orders past their deadline and not closed yet, counted at each alert evaluation (capped at 100000).",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_webhook_deliveries_total",
			Help: "Webhook delivery attempts by outcome: delivered (2xx), retry (failed, another attempt scheduled), dead (failed its last attempt), unrecorded (made, but the database refused its record; it still counts against the retry schedule).",
		}, []string{"outcome"}),
		deliveryLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_webhook_delivery_lag_seconds",
			Help:    "From an event's commit to its delivery's first attempt, on the node that made it.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120, 300},
		}),
		fanoutPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_fanout_pending",
			Help: "Close batches of a burst whose order.closed webhook deliveries are deferred and not created yet (rows of fanout_pending, each up to 512 orders), counted by the fan-out loop at each look (about every second).",
		}),
		deadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_webhook_dead_letters",
			Help: "Webhook deliveries in the dead-letter list (failed their last attempt), counted at each alert evaluation.",
		}),
		bulkRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_bulk_actions_running",
			Help: "Filtered bulk actions this node runs now (it holds their lease); summed over the nodes, those running.",
		}),
	}
	reg.MustRegister(m.closeLateness, m.closed, m.fireLateness, m.fired, m.closeFailures, m.sweeperFound, m.sweeperRecover, m.stale, m.schedFailures,
		m.requests, m.requestLatency, m.commitWrites, m.commitLatency, m.dbRetries, m.alertsFiring, m.closeBacklog, m.deadLetters,
		m.bulkRunning, m.deliveries, m.deliveryLag, m.fanoutPending,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hourglass_timers_pending",
			Help: "Timers held in the in-memory wheel (pending orders due within the window).",
		}, func() float64 { return float64(pending()) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.cluster = newClusterMetrics(reg)
	m.retention = newRetentionMetrics(reg)
	m.timerRequests = newRequestMetrics(reg)
	m.beforeClose = newBeforeCloseMetrics(reg)
	m.sources = newSourceMetrics(reg)
	m.noticesRejected = newNoticesRejected(reg)
	m.reminders = newReminderMetrics(reg)
	// Pre-create the label values so the series exist from the start.
	m.closed.WithLabelValues("scheduler")
	m.closed.WithLabelValues("sweeper")
	m.fired.WithLabelValues("scheduler")
	m.fired.WithLabelValues("sweeper")
	for _, reason := range []string{"deadlock", "certification", "serialization"} {
		m.dbRetries.WithLabelValues(reason)
	}
	for _, outcome := range []string{"delivered", "retry", "dead"} {
		m.deliveries.WithLabelValues(outcome)
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Closed implements engine.Observer.
func (m *Metrics) Closed(c hourglass.ClosedOrder, swept bool) {
	m.closeLateness.Observe(c.ClosedAt.Sub(c.Deadline).Seconds())
	if swept {
		m.closed.WithLabelValues("sweeper").Inc()
		m.sweeperRecover.Inc()
		return
	}
	m.closed.WithLabelValues("scheduler").Inc()
}

// Fired implements engine.TimerObserver.
func (m *Metrics) Fired(t hourglass.FiredTimer, swept bool) {
	m.fireLateness.Observe(t.FiredAt.Sub(t.FireAt).Seconds())
	if swept {
		m.fired.WithLabelValues("sweeper").Inc()
		return
	}
	m.fired.WithLabelValues("scheduler").Inc()
}

// CloseFailed implements engine.Observer.
func (m *Metrics) CloseFailed(n int, _ error) { m.closeFailures.Add(float64(n)) }

// Stale implements engine.Observer.
func (m *Metrics) Stale(n int) { m.stale.Add(float64(n)) }

// SchedulerFailed implements engine.Observer.
func (m *Metrics) SchedulerFailed(error) { m.schedFailures.Inc() }

// Swept implements engine.Observer.
func (m *Metrics) Swept(found int) { m.sweeperFound.Add(float64(found)) }

// requestKey names one series of hourglass_http_requests_total.
type requestKey struct {
	route, method string
	code          int
}

// requestSeries are the series one request's observation updates, bound to
// their labels.
type requestSeries struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// ObserveRequest records one API request. It binds a route, method and
// code's series on their first request and reuses them after: every
// request of the API passes here, and WithLabelValues hashes and checks
// its labels each time.
func (m *Metrics) ObserveRequest(route, method string, code int, d time.Duration) {
	k := requestKey{route: route, method: method, code: code}
	v, ok := m.requestSeries.Load(k)
	if !ok {
		v, _ = m.requestSeries.LoadOrStore(k, &requestSeries{
			count:   m.requests.WithLabelValues(route, method, strconv.Itoa(code)),
			latency: m.requestLatency.WithLabelValues(route, method),
		})
	}
	s := v.(*requestSeries)
	s.count.Inc()
	s.latency.Observe(d.Seconds())
}

// ObserveCommit records one group commit of the store.
func (m *Metrics) ObserveCommit(writes int, d time.Duration) {
	m.commitWrites.Observe(float64(writes))
	m.commitLatency.Observe(d.Seconds())
}

// ObserveRetry counts one database transaction run again, by reason
// (store.Options.ObserveRetry).
func (m *Metrics) ObserveRetry(reason string) { m.dbRetries.WithLabelValues(reason).Inc() }

// AlertFiring implements alert.Observer: it sets hourglass_alerts_firing{rule}.
func (m *Metrics) AlertFiring(rule string, firing bool) {
	v := 0.0
	if firing {
		v = 1
	}
	m.alertsFiring.WithLabelValues(rule).Set(v)
}

// CloseBacklog implements alert.Observer: it sets hourglass_close_backlog.
func (m *Metrics) CloseBacklog(n int) { m.closeBacklog.Set(float64(n)) }

// DeadLetters implements alert.Observer: it sets hourglass_webhook_dead_letters.
func (m *Metrics) DeadLetters(n int) { m.deadLetters.Set(float64(n)) }

// BulkRunning sets how many bulk actions this node runs (bulk.Config.Observe).
func (m *Metrics) BulkRunning(n int) { m.bulkRunning.Set(float64(n)) }

// Names returns the names of the metric families the registry exposes now
// (histograms as their base name), for checking references to them.
func (m *Metrics) Names() ([]string, error) {
	families, err := m.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("metrics: gather: %w", err)
	}
	out := make([]string, len(families))
	for i, f := range families {
		out[i] = f.GetName()
	}
	return out, nil
}

// WebhookAttempted implements webhook.Observer: it counts one delivery
// attempt in hourglass_webhook_deliveries_total{outcome}.
func (m *Metrics) WebhookAttempted(outcome string) { m.deliveries.WithLabelValues(outcome).Inc() }

// FanoutPending sets hourglass_fanout_pending
// (store.Options.ObserveFanoutPending).
func (m *Metrics) FanoutPending(n int) { m.fanoutPending.Set(float64(n)) }

// WebhookDeliveryLag implements webhook.LagObserver.
func (m *Metrics) WebhookDeliveryLag(d time.Duration) { m.deliveryLag.Observe(d.Seconds()) }
