package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/dashboard"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/requests"
	"github.com/hourglass/hourglass/source"
	"github.com/hourglass/hourglass/webhook"
)

// alerting is the alert evaluator, the close-path activity recorder it and
// the dashboard read, and the dashboard's data source.
type alerting struct {
	recorder  *alert.Recorder
	evaluator *alert.Evaluator
	dashboard api.DashboardSource // nil with --no-dashboard
}

// Alerts configures the alert rules and the dashboard (package alert).
type Alerts struct {
	// Webhook is the URL every firing and resolve is POSTed to (none if
	// empty).
	Webhook string
	// Interval and Window are alert.Config's.
	Interval, Window time.Duration
	// Thresholds are the rules' thresholds; New sets DeadLetterMax
	// (Retention.DeadLetterMax) and DBClockSkew (Cluster.MaxDBClockSkew).
	Thresholds alert.Thresholds
	// NoDashboard leaves out the dashboard page and its data.
	NoDashboard bool
}

// newAlerting builds the alerting parts over the store and the metrics.
// ready is the engine's Recovered (and leadership): rules are evaluated
// only once start-up recovery ran.
// beforeClose, when not nil, adds the before_close_failures rule; sinks,
// when not nil, the event_sink_lag rule.
func newAlerting(cfg Alerts, store hourglass.Database, m *metrics.Metrics, self *member, deadLetterMax int, maxDBClockSkew time.Duration, ready func() bool, beforeClose alert.FailureSource, sinks alert.EventSinkLagSource, sources *source.Runner, clock hourglass.Clock, log *slog.Logger) (*alerting, error) {
	a := &alerting{recorder: alert.NewRecorder(clock)}
	deadLetters := deadLetterCount{store}
	th := cfg.Thresholds
	th.DeadLetterMax, th.DBClockSkew = deadLetterMax, maxDBClockSkew
	ev, err := alert.New(alert.Config{
		Backlog:     store,
		Activity:    a.recorder,
		DeadLetters: deadLetters,
		ClockSkew:   self.skewSource(),
		BeforeClose: beforeClose,
		EventSinks:  sinks,
		Sources:     sourceHealth(sources),
		BlockedRows: blockedRows(sources),
		Thresholds:  th,
		Interval:    cfg.Interval,
		Window:      cfg.Window,
		Ready:       ready,
		Webhook:     alert.WebhookConfig{URL: cfg.Webhook},
		Observer:    m,
		Clock:       clock,
		Logger:      log,
	})
	if err != nil {
		return nil, fmt.Errorf("--alert-*: %w", err)
	}
	a.evaluator = ev
	if !cfg.NoDashboard {
		cfg := dashboard.Config{Stats: store, Activity: a.recorder, Alerts: ev, DeadLetters: deadLetters, Timers: store,
			TimerRequests: store, Fanout: store, DeliveryLag: true}
		cfg.Sources = dashboardSources(sources, clock)
		src, err := dashboard.New(cfg)
		if err != nil {
			return nil, err
		}
		a.dashboard = src
	}
	return a, nil
}

// requestObserver returns the observer of the timer-request applier: the
// metrics and the dashboard's recorder.
func (a *alerting) requestObserver(m *metrics.Metrics) requests.Observer {
	return requestObservers{m, a.recorder}
}

type requestObservers struct {
	m *metrics.Metrics
	r *alert.Recorder
}

func (o requestObservers) TimerRequestsApplied(applied, rejected int, lags []time.Duration) {
	o.m.TimerRequestsApplied(applied, rejected, lags)
	o.r.TimerRequestsApplied(applied, rejected, lags)
}

// start runs the evaluator until ctx ends; the returned wait blocks until it
// has stopped (call it before closing the store).
func (a *alerting) start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.evaluator.Run(ctx) }()
	return wg.Wait
}

// engineObserver returns an engine.Observer telling m, the recorder and
// also (when not nil: Config.Engine.Observer).
func (a *alerting) engineObserver(m, also engine.Observer) engine.Observer {
	if also != nil {
		return engineObservers{m, a.recorder, also}
	}
	return engineObservers{m, a.recorder}
}

// apiObserver returns an api.Observer telling m, the recorder and also
// (when not nil: Config.APIObserver).
func (a *alerting) apiObserver(m, also api.Observer) api.Observer {
	if also != nil {
		return apiObservers{m, a.recorder, also}
	}
	return apiObservers{m, a.recorder}
}

// webhookObserver returns a webhook.Observer (and webhook.LagObserver)
// telling m, and the recorder the delivery lag (for the dashboard).
func (a *alerting) webhookObserver(m *metrics.Metrics) webhook.Observer {
	return webhookObservers{m, a.recorder}
}

// webhookObservers reports webhook delivery to the metrics and the recorder.
type webhookObservers struct {
	m   *metrics.Metrics
	rec *alert.Recorder
}

func (o webhookObservers) WebhookAttempted(outcome string) { o.m.WebhookAttempted(outcome) }

// WebhookDeliveryLag implements webhook.LagObserver.
func (o webhookObservers) WebhookDeliveryLag(d time.Duration) {
	o.m.WebhookDeliveryLag(d)
	o.rec.WebhookDeliveryLag(d)
}

// deadLetterCount counts the dead letters in the store's delivery table.
type deadLetterCount struct{ store hourglass.WebhookStore }

func (d deadLetterCount) DeadLetterCount(ctx context.Context) (int, error) {
	_, dead, err := d.store.DeliveryCounts(ctx)
	return dead, err
}

// engineObservers fans engine events out to several observers.
type engineObservers []engine.Observer

func (os engineObservers) Closed(c hourglass.ClosedOrder, swept bool) {
	for _, o := range os {
		o.Closed(c, swept)
	}
}

// Fired tells the observers that watch timers (engine.TimerObserver).
func (os engineObservers) Fired(t hourglass.FiredTimer, swept bool) {
	for _, o := range os {
		if to, ok := o.(engine.TimerObserver); ok {
			to.Fired(t, swept)
		}
	}
}

func (os engineObservers) Stale(n int) {
	for _, o := range os {
		o.Stale(n)
	}
}

func (os engineObservers) CloseFailed(n int, err error) {
	for _, o := range os {
		o.CloseFailed(n, err)
	}
}

func (os engineObservers) Swept(found int) {
	for _, o := range os {
		o.Swept(found)
	}
}

func (os engineObservers) SchedulerFailed(err error) {
	for _, o := range os {
		o.SchedulerFailed(err)
	}
}

// apiObservers fans request observations out to several observers.
type apiObservers []api.Observer

func (os apiObservers) ObserveRequest(route, method string, code int, d time.Duration) {
	for _, o := range os {
		o.ObserveRequest(route, method, code, d)
	}
}
