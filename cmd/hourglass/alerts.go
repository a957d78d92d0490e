package main

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
	"github.com/hourglass/hourglass/webhook"
)

// alertFlags are the alerting and dashboard settings.
type alertFlags struct {
	AlertWebhook              string        `help:"URL that every alert firing and resolve is POSTed to as JSON (none if empty)." env:"HOURGLASS_ALERT_WEBHOOK"`
	AlertInterval             time.Duration `help:"How often the alert rules are evaluated." default:"5s" env:"HOURGLASS_ALERT_INTERVAL"`
	AlertWindow               time.Duration `help:"Window over which close lateness and close failures are measured (1s to 5m)." default:"1m" env:"HOURGLASS_ALERT_WINDOW"`
	AlertCloseBacklog         int           `help:"Fire when more pending orders than this are past their deadline and not closed." default:"1000" env:"HOURGLASS_ALERT_CLOSE_BACKLOG"`
	AlertCloseLatenessP99     time.Duration `name:"alert-close-lateness-p99" help:"Fire when the p99 of closed_at - deadline over the window is above this." default:"3s" env:"HOURGLASS_ALERT_CLOSE_LATENESS_P99"`
	AlertCloseFailureRate     float64       `help:"Fire when more than this fraction of close attempts over the window failed (0.01 is 1%)." default:"0.01" env:"HOURGLASS_ALERT_CLOSE_FAILURE_RATE"`
	AlertStockReleaseFailures float64       `help:"Fire when more closes (stock releases) than this failed per minute over the window." default:"5" env:"HOURGLASS_ALERT_STOCK_RELEASE_FAILURES"`
	AlertDeadLetters          int           `help:"Fire when the dead-letter list holds more webhook deliveries than this." default:"0" env:"HOURGLASS_ALERT_DEAD_LETTERS"`
	Dashboard                 bool          `help:"Serve the dashboard page at / and its data at /v1/dashboard." default:"true" negatable:"" env:"HOURGLASS_DASHBOARD"`
	// deadLetterMax is --dead-letter-max (retention.go), for the
	// dead_letters_near_max rule; 0 leaves it out.
	deadLetterMax int
	// clockSkew and maxDBClockSkew are the cluster's (cluster.go), for the
	// db_clock_skew rule; a nil clockSkew leaves it out.
	clockSkew      alert.ClockSkewSource
	maxDBClockSkew time.Duration
}

// validate checks the thresholds that alert.Config would otherwise read as
// "default" (zero) or refuse with a less precise message.
func (f *alertFlags) validate() error {
	switch {
	case f.AlertCloseBacklog < 1:
		return fmt.Errorf("--alert-close-backlog must be at least 1, got %d", f.AlertCloseBacklog)
	case f.AlertCloseLatenessP99 <= 0:
		return fmt.Errorf("--alert-close-lateness-p99 must be above 0, got %s", f.AlertCloseLatenessP99)
	case f.AlertCloseFailureRate <= 0 || f.AlertCloseFailureRate >= 1:
		return fmt.Errorf("--alert-close-failure-rate must be a fraction between 0 and 1 exclusive (0.01 is 1%%), got %g", f.AlertCloseFailureRate)
	case f.AlertStockReleaseFailures <= 0:
		return fmt.Errorf("--alert-stock-release-failures must be above 0 per minute, got %g", f.AlertStockReleaseFailures)
	case f.AlertDeadLetters < 0:
		return fmt.Errorf("--alert-dead-letters must be at least 0, got %d", f.AlertDeadLetters)
	case f.AlertInterval < 10*time.Millisecond || f.AlertInterval > time.Hour:
		return fmt.Errorf("--alert-interval must be between 10ms and 1h, got %s", f.AlertInterval)
	case f.AlertWindow < time.Second || f.AlertWindow > alert.RecorderSpan:
		return fmt.Errorf("--alert-window must be between 1s and %s, got %s", alert.RecorderSpan, f.AlertWindow)
	}
	return nil
}

// alerting is the alert evaluator, the close-path activity recorder it and
// the dashboard read, and the dashboard's data source.
type alerting struct {
	recorder  *alert.Recorder
	evaluator *alert.Evaluator
	dashboard api.DashboardSource // nil with --no-dashboard
}

// wire builds the alerting parts over the store and the metrics. ready is
// the engine's Recovered: rules are evaluated only once start-up recovery ran.
func (f *alertFlags) wire(store hourglass.Database, m *metrics.Metrics, ready func() bool, clock hourglass.Clock, log *slog.Logger) (*alerting, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	a := &alerting{recorder: alert.NewRecorder(clock)}
	deadLetters := deadLetterCount{store}
	ev, err := alert.New(alert.Config{
		Backlog:     store,
		Activity:    a.recorder,
		DeadLetters: deadLetters,
		ClockSkew:   f.clockSkew,
		Thresholds: alert.Thresholds{
			CloseBacklog:         f.AlertCloseBacklog,
			CloseLatenessP99:     f.AlertCloseLatenessP99,
			CloseFailureRate:     f.AlertCloseFailureRate,
			StockReleaseFailures: f.AlertStockReleaseFailures,
			DeadLetters:          f.AlertDeadLetters,
			DeadLetterMax:        f.deadLetterMax,
			DBClockSkew:          f.maxDBClockSkew,
		},
		Interval: f.AlertInterval,
		Window:   f.AlertWindow,
		Ready:    ready,
		Webhook:  alert.WebhookConfig{URL: f.AlertWebhook},
		Observer: m,
		Clock:    clock,
		Logger:   log,
	})
	if err != nil {
		return nil, fmt.Errorf("--alert-*: %w", err)
	}
	a.evaluator = ev
	if f.Dashboard {
		fanout, _ := store.(dashboard.FanoutCounter) // every store has one
		src, err := dashboard.New(dashboard.Config{Stats: store, Activity: a.recorder, Alerts: ev, DeadLetters: deadLetters, Timers: store,
			Fanout: fanout, DeliveryLag: true})
		if err != nil {
			return nil, err
		}
		a.dashboard = src
	}
	return a, nil
}

// start runs the evaluator until ctx ends; the returned wait blocks until it
// has stopped (call it before closing the store).
func (a *alerting) start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.evaluator.Run(ctx) }()
	return wg.Wait
}

// engineObserver returns an engine.Observer telling both m and the recorder.
func (a *alerting) engineObserver(m engine.Observer) engine.Observer {
	return engineObservers{m, a.recorder}
}

// apiObserver returns an api.Observer telling both m and the recorder.
func (a *alerting) apiObserver(m api.Observer) api.Observer {
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
