package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/source"
)

// openSources opens the --sources (nil when there are none): each is
// checked against the database, a bad one refused with one line, and a
// warning logged for each query a missing index would make read a whole
// table. They close on the node's clock, partitioned like orders.
func openSources(ctx context.Context, cfg Config, db hourglass.Database, self *member, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*source.Runner, error) {
	if len(cfg.Sources) == 0 {
		return nil, nil
	}
	ss, ok := db.(hourglass.SourceStore)
	if !ok {
		return nil, fmt.Errorf("--sources needs PostgreSQL or MySQL (--database-url): the shop's tables live in hourglass's database, and SQLite cannot be shared with an order service")
	}
	// Sources with a before_close share a payment checker, signed with
	// --before-close-secret.
	var check source.Checker
	for _, s := range cfg.Sources {
		if s.BeforeClose == "" {
			continue
		}
		checker, err := beforeclose.New(beforeclose.Config{Secret: cfg.BeforeClose.Secret, Timeout: cfg.BeforeClose.Timeout, Clock: clock, Observer: m, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--sources: before_close: %w", err)
		}
		check = source.PaymentCheck{Checker: checker, Clock: clock, Logger: log}
		break
	}
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, warnings, err := source.New(openCtx, source.Config{
		Store:         ss,
		Sources:       cfg.Sources,
		Window:        cfg.Engine.Window,
		LoadInterval:  cfg.Engine.LoadInterval,
		TailInterval:  cfg.SourceTailInterval,
		SweepInterval: cfg.Engine.SweepInterval,
		SweepGrace:    max(cfg.Engine.SweepGrace, 0),
		Ownership:     self.ownership(),
		Observer:      m,
		Checker:       check,
		Clock:         clock,
		Logger:        log,
	})
	if err != nil {
		return nil, fmt.Errorf("--sources: %w", err)
	}
	for _, w := range warnings {
		log.Warn("hourglass: " + w)
	}
	for _, s := range cfg.Sources {
		log.Info("hourglass: closing a source", "source", s.Name, "table", s.Table)
	}
	return r, nil
}

// startSources runs r until ctx ends (nothing when r is nil); wait blocks
// until it has stopped.
func startSources(ctx context.Context, r *source.Runner) (wait func()) {
	if r == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	return func() { <-done }
}
