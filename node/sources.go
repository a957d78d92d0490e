package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/dashboard"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/source"
)

// openSources opens the --sources (nil when there are none): each is
// checked against the database, a bad one refused with one line, and a
// warning logged for each query a missing index would make read a whole
// table. They close on the node's clock, partitioned like orders.
func openSources(ctx context.Context, cfg Config, db hourglass.Database, self *member, gate *beforeclose.Gate, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*source.Runner, error) {
	if len(cfg.Sources) == 0 {
		return nil, nil
	}
	ss, ok := db.(hourglass.SourceStore)
	if !ok {
		return nil, fmt.Errorf("--sources needs PostgreSQL or MySQL (--database-url): the shop's tables live in hourglass's database, and SQLite cannot be shared with an order service")
	}
	// Sources with a before_close ask through the node's one payment
	// check, signed with --before-close-secret.
	var check source.Checker
	if gate != nil && source.AsksBeforeClose(cfg.Sources) {
		check = source.PaymentCheck{Gate: gate}
	}
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, warnings, err := source.New(openCtx, source.Config{
		Store:         ss,
		Sources:       cfg.Sources,
		Window:        cfg.Engine.Window,
		LoadInterval:  cfg.Engine.LoadInterval,
		TailInterval:  cfg.SourceTailInterval,
		BlockedAlert:  cfg.SourceBlockedAlert,
		SweepInterval: cfg.Engine.SweepInterval,
		SweepGrace:    max(cfg.Engine.SweepGrace, 0),
		Ownership:     self.ownership(),
		Observer:      m,
		Checker:       check,
		Node:          self.nodeID(),
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
		m.SourceConfigured(s.Name)
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

// sourceHealth is the source_misconfigured and source_bad_rows rules'
// source: nil (no rule)
// without sources.
func sourceHealth(r *source.Runner) alert.SourceHealth {
	if r == nil {
		return nil
	}
	return r
}

// blockedRows is the source_row_blocked rule's source: nil (no rule)
// without sources.
func blockedRows(r *source.Runner) alert.BlockedRowSource {
	if r == nil {
		return nil
	}
	return r
}

// sourceFailures is the sources' payment checks as a before_close_failures
// source: nil when no source asks.
func sourceFailures(r *source.Runner) alert.FailureSource {
	if r == nil || !r.Checks() {
		return nil
	}
	return r
}

// anyFailing is the failure source of several (nil ones left out; nil
// when none is left): failing since the earliest of theirs.
func anyFailing(srcs ...alert.FailureSource) alert.FailureSource {
	var out failingAny
	for _, s := range srcs {
		if s != nil {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

type failingAny []alert.FailureSource

func (f failingAny) FailingSince() (since time.Time, ok bool) {
	for _, s := range f {
		if t, yes := s.FailingSince(); yes && (!ok || t.Before(since)) {
			since, ok = t, true
		}
	}
	return since, ok
}

// sourceCards adapts the runner to the dashboard's Sources card.
type sourceCards struct {
	r     *source.Runner
	clock hourglass.Clock
}

// SourceStats implements dashboard.SourceStats.
func (c sourceCards) SourceStats() []dashboard.SourceStat {
	stats := c.r.Stats(c.clock.Now())
	out := make([]dashboard.SourceStat, len(stats))
	for i, s := range stats {
		out[i] = dashboard.SourceStat{Name: s.Name, Held: s.Held, Closes: s.Closes, Noops: s.Noops, GuardErrors: s.GuardErrors,
			CloseErrors: s.CloseErrors, Swept: s.Swept, LatenessP50Seconds: s.LatenessP50.Seconds(), LatenessP99Seconds: s.LatenessP99.Seconds(),
			Misconfigured: s.Misconfigured, BadRows: s.BadRows, BadRowList: make([]dashboard.SourceBadRow, len(s.BadRowList))}
		for j, b := range s.BadRowList {
			out[i].BadRowList[j] = dashboard.SourceBadRow{Key: b.Key, Deadline: b.Deadline, Reason: b.Reason, FoundAt: b.FoundAt.UTC().Format(hourglass.TimeFormat)}
		}
	}
	return out
}

// sourceBadRows is the source of GET /v1/sources/{name}/bad-rows: nil
// (no route) without sources.
func sourceBadRows(r *source.Runner) api.SourceBadRows {
	if r == nil {
		return nil
	}
	return r
}

// sourceRows is the API's reader of the sources' rows: nil without sources.
func sourceRows(r *source.Runner) api.SourceRows {
	if r == nil {
		return nil
	}
	return r
}

// dashboardSources is the dashboard's source of the Sources card: nil
// without sources.
func dashboardSources(r *source.Runner, clock hourglass.Clock) dashboard.SourceStats {
	if r == nil {
		return nil
	}
	return sourceCards{r, clock}
}
