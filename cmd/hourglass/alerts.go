package main

import (
	"fmt"
	"time"

	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/node"
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

// config returns the node's alerting config the flags describe, or an
// error naming the flag to fix.
func (f *alertFlags) config() (node.Alerts, error) {
	if err := f.validate(); err != nil {
		return node.Alerts{}, err
	}
	return node.Alerts{
		Webhook:  f.AlertWebhook,
		Interval: f.AlertInterval,
		Window:   f.AlertWindow,
		Thresholds: alert.Thresholds{
			CloseBacklog:         f.AlertCloseBacklog,
			CloseLatenessP99:     f.AlertCloseLatenessP99,
			CloseFailureRate:     f.AlertCloseFailureRate,
			StockReleaseFailures: f.AlertStockReleaseFailures,
			DeadLetters:          f.AlertDeadLetters,
		},
		NoDashboard: !f.Dashboard,
	}, nil
}
