package node

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/source"
)

// BeforeClose configures the payment check before hourglass closes its own
// orders (package beforeclose). The zero value (no URL) checks nothing.
type BeforeClose struct {
	// URL is POSTed {"order":{…}} before each close (http or https).
	URL string
	// Secret signs each check like a webhook delivery (Hourglass-Signature).
	Secret string
	// OnError is beforeclose.OnErrorWait (default) or OnErrorClose.
	OnError string
	// MaxFailures is the failures in a row after which OnErrorClose closes
	// an order (default beforeclose.MaxFailuresDefault).
	MaxFailures int
	// Timeout bounds one check (default beforeclose.TimeoutDefault).
	Timeout time.Duration
	// Concurrency is how many checks run at once (default
	// beforeclose.ConcurrencyDefault).
	Concurrency int
}

// Validate reports a configuration error in one line naming the flag.
func (c BeforeClose) Validate() error {
	if c.URL == "" {
		return nil
	}
	if err := beforeclose.ValidateURL(c.URL); err != nil {
		return fmt.Errorf("--before-close-url: %w", err)
	}
	switch c.OnError {
	case "", beforeclose.OnErrorWait, beforeclose.OnErrorClose:
	default:
		return fmt.Errorf("--before-close-on-error: %q is not wait or close", c.OnError)
	}
	if c.MaxFailures < 0 {
		return fmt.Errorf("--before-close-max-failures: must be at least 1, got %d", c.MaxFailures)
	}
	if c.Concurrency < 0 {
		return fmt.Errorf("before-close concurrency: must be at least 1, got %d", c.Concurrency)
	}
	return nil
}

// newBeforeClose returns the node's one payment check: nil when neither
// --before-close-url nor a source's before_close asks. It checks orders
// (Hold) only with a URL; the sources' checks share it, so that the
// before_close_failures alert sees every check the node makes.
func newBeforeClose(cfg BeforeClose, sources []hourglass.Source, store hourglass.Store, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*beforeclose.Gate, error) {
	if cfg.URL == "" && !source.AsksBeforeClose(sources) {
		return nil, nil
	}
	gc := beforeclose.GateConfig{
		Checker:     beforeclose.Config{Secret: cfg.Secret, Timeout: cfg.Timeout, Clock: clock, Observer: m, Logger: log},
		Concurrency: cfg.Concurrency,
	}
	if cfg.URL != "" {
		gc.Orders, gc.URL, gc.Policy = store, cfg.URL, beforeclose.Policy{OnError: cfg.OnError, MaxFailures: cfg.MaxFailures}
		log.Info("hourglass: payment check before closes", "url", redact.URL(cfg.URL), "on_error", cmp.Or(cfg.OnError, beforeclose.OnErrorWait))
	}
	g, err := beforeclose.NewGate(gc)
	if err != nil {
		return nil, fmt.Errorf("--before-close-*: %w", err)
	}
	return g, nil
}

// checksOrders reports whether g checks hourglass's own orders.
func (cfg BeforeClose) checksOrders(g *beforeclose.Gate) bool { return g != nil && cfg.URL != "" }

// gateFailures returns the orders' checks as the source of the
// before_close_failures alert: nil (no rule) without --before-close-url.
func gateFailures(cfg BeforeClose, g *beforeclose.Gate) alert.FailureSource {
	if !cfg.checksOrders(g) {
		return nil
	}
	return g
}

// startGate runs the gate's order checks until ctx ends (nothing without
// --before-close-url); wait blocks until they stopped.
func startGate(ctx context.Context, cfg BeforeClose, g *beforeclose.Gate) (wait func()) {
	if !cfg.checksOrders(g) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	return func() { <-done }
}
