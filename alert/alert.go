// Package alert evaluates hourglass's built-in alert rules — close backlog,
// close lateness p99, close failure rate, stock-release failures per minute,
// dead letters and database clock skew — on a fixed interval, and reports each change of state
// (firing, resolved) to the log, to an Observer (the
// hourglass_alerts_firing metric) and, once per change, to an alert webhook.
//
// The rules read the store's (status, deadline) index (backlog), a Recorder
// of the last minutes of close-path activity (lateness, failures), and the
// webhook service (dead letters) and the cluster's membership (the skew
// between database servers' clocks). deploy/prometheus/alerts.yml states the
// same rules in PromQL for users who run Prometheus.
package alert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
)

// Rule names, as they appear in the metric label, the log, the webhook
// payload and the dashboard.
const (
	// RuleCloseBacklog: pending orders past their deadline and not closed yet.
	RuleCloseBacklog = "close_backlog"
	// RuleCloseLatenessP99: p99 of closed_at - deadline over the window.
	RuleCloseLatenessP99 = "close_lateness_p99"
	// RuleCloseFailureRate: failed closes / close attempts over the window.
	RuleCloseFailureRate = "close_failure_rate"
	// RuleStockReleaseFailures: failed closes (each one a stock release that
	// did not happen) per minute over the window.
	RuleStockReleaseFailures = "stock_release_failures"
	// RuleDeadLetters: webhook deliveries that exhausted their retries.
	RuleDeadLetters = "dead_letters"
	// RuleDeadLettersNearMax: the dead-letter list at DeadLettersNearMaxFraction
	// of its maximum, past which the oldest are dropped for good.
	RuleDeadLettersNearMax = "dead_letters_near_max"
	// RuleDBClockSkew: the largest difference between the clocks of two
	// database servers (Galera nodes) the cluster's nodes reach.
	RuleDBClockSkew = "db_clock_skew"
)

// Defaults: the documents' thresholds, and the evaluation cadence.
const (
	CloseBacklogDefault         = 1000
	CloseLatenessP99Default     = 3 * time.Second
	CloseFailureRateDefault     = 0.01
	StockReleaseFailuresDefault = 5.0
	DeadLettersDefault          = 0
	DBClockSkewDefault          = 100 * time.Millisecond
	IntervalDefault             = 5 * time.Second
	WindowDefault               = time.Minute
	// BacklogCountCap bounds the backlog count (an index range scan): past
	// it the rule only needs to know the backlog is huge.
	BacklogCountCap = 100000
)

// DeadLettersNearMaxFraction is the share of Thresholds.DeadLetterMax at
// which RuleDeadLettersNearMax fires: before any dead letter is dropped.
const DeadLettersNearMaxFraction = 0.9

// Thresholds are the values above which each rule fires. The zero value of
// each field means its default, except DeadLetters whose default is 0.
type Thresholds struct {
	// CloseBacklog is a number of overdue pending orders (default 1000).
	CloseBacklog int
	// CloseLatenessP99 (default 3s).
	CloseLatenessP99 time.Duration
	// CloseFailureRate is a fraction of close attempts, 0..1 (default 0.01).
	CloseFailureRate float64
	// StockReleaseFailures is failed closes per minute (default 5).
	StockReleaseFailures float64
	// DeadLetters is a number of dead letters (default 0: any fires).
	DeadLetters int
	// DeadLetterMax is the most dead letters kept (retention's
	// DeadLetterMax); RuleDeadLettersNearMax fires above
	// DeadLettersNearMaxFraction of it. 0 leaves the rule out.
	DeadLetterMax int
	// DBClockSkew is a difference between database servers' clocks
	// (default 100ms).
	DBClockSkew time.Duration
}

// BacklogCounter counts pending orders due at or before until, at most limit
// of them. Every hourglass.StatsStore implements it.
type BacklogCounter interface {
	CountPendingDue(ctx context.Context, until time.Time, limit int) (int, error)
}

// DeadLetterCounter counts the webhook deliveries in the dead-letter list.
type DeadLetterCounter interface {
	DeadLetterCount(ctx context.Context) (int, error)
}

// ClockSkewSource is the skew between the clocks of the database servers
// the cluster's nodes reach, as last measured (cluster.ClockSkewOf).
type ClockSkewSource interface {
	DBClockSkew() time.Duration
}

// ActivitySource is the recent close-path activity (a *Recorder).
type ActivitySource interface {
	Activity(now time.Time, span time.Duration) Activity
}

// Observer is told every rule's state after each evaluation, and the values
// that have a metric of their own. It must be safe for concurrent use.
type Observer interface {
	// AlertFiring sets hourglass_alerts_firing{rule}.
	AlertFiring(rule string, firing bool)
	// CloseBacklog reports the counted backlog (capped at BacklogCountCap).
	CloseBacklog(n int)
	// DeadLetters reports the size of the dead-letter list.
	DeadLetters(n int)
}

// Config configures an Evaluator. Backlog and Activity are required; the
// zero value of every other field means its default.
type Config struct {
	Backlog  BacklogCounter
	Activity ActivitySource
	// DeadLetters, when nil, leaves out the dead-letters rule (webhooks are
	// not configured).
	DeadLetters DeadLetterCounter
	// ClockSkew, when nil, leaves out the db_clock_skew rule (a database
	// that one process owns).
	ClockSkew ClockSkewSource
	// BeforeClose, when set, adds the before_close_failures rule over the
	// payment check's failures (--before-close-url).
	BeforeClose FailureSource
	// EventSinks, when set, adds the event_sink_lag rule over the event
	// sinks' lag (--event-sink).
	EventSinks EventSinkLagSource
	// Sources, when set, adds the source_misconfigured and
	// source_bad_rows rules (--sources).
	Sources    SourceHealth
	Thresholds Thresholds
	// Interval between evaluations (default 5s). A negative Interval means
	// Run evaluates nothing by itself and only delivers the notifications
	// of the caller's Evaluate calls.
	Interval time.Duration
	// Window over which lateness and failures are measured (default 1m, at
	// most RecorderSpan).
	Window time.Duration
	// Ready, when set, holds evaluation back until it returns true, so the
	// backlog a restart leaves (closed by start-up recovery) does not fire.
	Ready func() bool
	// Webhook, when set, is the URL every firing and resolve is POSTed to.
	Webhook  WebhookConfig
	Observer Observer
	// Clock gives each evaluation its now and times Run's Interval (nil:
	// the system clock; see hourglass.WithTimers).
	Clock  hourglass.Clock
	Logger *slog.Logger

	// BlockedRows, when set, adds the source_row_blocked rule (--sources).
	BlockedRows BlockedRowSource
}

// Validate reports a configuration error, naming the field and its range.
func (c Config) Validate() error {
	if c.Backlog == nil || c.Activity == nil {
		return errors.New("alert: Backlog and Activity are required")
	}
	t := c.Thresholds
	switch {
	case t.CloseBacklog < 0:
		return fmt.Errorf("alert: close backlog threshold must be >= 0, got %d", t.CloseBacklog)
	case t.CloseLatenessP99 < 0:
		return fmt.Errorf("alert: close lateness p99 threshold must be >= 0, got %s", t.CloseLatenessP99)
	case t.CloseFailureRate < 0 || t.CloseFailureRate >= 1:
		return fmt.Errorf("alert: close failure rate threshold must be in [0, 1) (0.01 is 1%%), got %g", t.CloseFailureRate)
	case t.StockReleaseFailures < 0:
		return fmt.Errorf("alert: stock release failures threshold must be >= 0 per minute, got %g", t.StockReleaseFailures)
	case t.DeadLetters < 0:
		return fmt.Errorf("alert: dead letters threshold must be >= 0, got %d", t.DeadLetters)
	case t.DeadLetterMax < 0:
		return fmt.Errorf("alert: dead letter max must be >= 0, got %d", t.DeadLetterMax)
	case t.DBClockSkew < 0:
		return fmt.Errorf("alert: database clock skew threshold must be >= 0, got %s", t.DBClockSkew)
	}
	if c.Interval > 0 && (c.Interval < time.Millisecond || c.Interval > time.Hour) {
		return fmt.Errorf("alert: interval must be between 1ms and 1h, got %s", c.Interval)
	}
	if c.Window != 0 && (c.Window < time.Second || c.Window > RecorderSpan) {
		return fmt.Errorf("alert: window must be between 1s and %s, got %s", RecorderSpan, c.Window)
	}
	return c.Webhook.validate()
}

// Status is the state of one rule after the last evaluation.
type Status struct {
	Rule      string
	Firing    bool
	Value     float64
	Threshold float64
	// Summary says what the value means, e.g. "12 pending orders past
	// their deadline (threshold 1000)".
	Summary string
	// Since is when the rule started firing (zero when it is not).
	Since time.Time
	// Err is the last evaluation's error, if the value could not be read
	// (the rule then keeps its previous state).
	Err string
}

// rule is one alert rule: how to read its value and describe it.
type rule struct {
	name      string
	threshold float64
	value     func(ctx context.Context, now time.Time, a Activity) (float64, error)
	summary   func(v float64) string
}

// Evaluator evaluates the rules every Interval (Run) or on demand
// (Evaluate). All its methods are safe for concurrent use.
type Evaluator struct {
	cfg      Config
	rules    []rule
	clock    hourglass.TimerClock
	log      *slog.Logger
	notifier *notifier // nil without a webhook

	evalMu sync.Mutex // one evaluation at a time
	ready  bool       // guarded by evalMu

	mu     sync.Mutex
	status map[string]Status
}

// New returns an evaluator with every rule not firing. It does nothing until
// Run or Evaluate.
func New(cfg Config) (*Evaluator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Window = cmp.Or(cfg.Window, WindowDefault)
	t := &cfg.Thresholds
	t.CloseBacklog = cmp.Or(t.CloseBacklog, CloseBacklogDefault)
	t.CloseLatenessP99 = cmp.Or(t.CloseLatenessP99, CloseLatenessP99Default)
	t.CloseFailureRate = cmp.Or(t.CloseFailureRate, CloseFailureRateDefault)
	t.StockReleaseFailures = cmp.Or(t.StockReleaseFailures, StockReleaseFailuresDefault)
	t.DBClockSkew = cmp.Or(t.DBClockSkew, DBClockSkewDefault)
	e := &Evaluator{cfg: cfg, clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger, status: map[string]Status{}}
	if e.log == nil {
		e.log = slog.Default()
	}
	if cfg.Webhook.URL != "" {
		e.notifier = newNotifier(cfg.Webhook, e.log)
	}
	e.rules = e.buildRules()
	for _, r := range e.rules {
		e.status[r.name] = Status{Rule: r.name, Threshold: r.threshold, Summary: r.summary(0)}
		if cfg.Observer != nil {
			cfg.Observer.AlertFiring(r.name, false)
		}
	}
	return e, nil
}

func (e *Evaluator) buildRules() []rule {
	t, window := e.cfg.Thresholds, e.cfg.Window
	rules := []rule{
		{
			name:      RuleCloseBacklog,
			threshold: float64(t.CloseBacklog),
			value: func(ctx context.Context, now time.Time, _ Activity) (float64, error) {
				n, err := e.cfg.Backlog.CountPendingDue(ctx, now, BacklogCountCap)
				if err == nil && e.cfg.Observer != nil {
					e.cfg.Observer.CloseBacklog(n)
				}
				return float64(n), err
			},
			summary: func(v float64) string {
				return fmt.Sprintf("%.0f pending orders past their deadline and not closed (threshold %d)", v, t.CloseBacklog)
			},
		},
		{
			name:      RuleCloseLatenessP99,
			threshold: t.CloseLatenessP99.Seconds(),
			value: func(_ context.Context, _ time.Time, a Activity) (float64, error) {
				return Quantile(0.99, a.Lateness), nil
			},
			summary: func(v float64) string {
				p99 := time.Duration(v * float64(time.Second)).Round(time.Microsecond)
				return fmt.Sprintf("p99 close lateness %s over the last %s (threshold %s)", p99, window, t.CloseLatenessP99)
			},
		},
		{
			name:      RuleCloseFailureRate,
			threshold: t.CloseFailureRate,
			value: func(_ context.Context, _ time.Time, a Activity) (float64, error) {
				failed := sum(a.Failed)
				attempts := failed + sum(a.Closed) + sum(a.Stale)
				if attempts == 0 {
					return 0, nil
				}
				return float64(failed) / float64(attempts), nil
			},
			summary: func(v float64) string {
				return fmt.Sprintf("%.2f%% of close attempts failed over the last %s (threshold %.2f%%)", 100*v, window, 100*t.CloseFailureRate)
			},
		},
		{
			name:      RuleStockReleaseFailures,
			threshold: t.StockReleaseFailures,
			value: func(_ context.Context, _ time.Time, a Activity) (float64, error) {
				return float64(sum(a.Failed)) / window.Minutes(), nil
			},
			summary: func(v float64) string {
				return fmt.Sprintf("%.1f stock releases (closes) failed per minute over the last %s (threshold %g/min)", v, window, t.StockReleaseFailures)
			},
		},
	}
	if e.cfg.DeadLetters != nil {
		rules = append(rules, rule{
			name:      RuleDeadLetters,
			threshold: float64(t.DeadLetters),
			value: func(ctx context.Context, _ time.Time, _ Activity) (float64, error) {
				n, err := e.cfg.DeadLetters.DeadLetterCount(ctx)
				if err == nil && e.cfg.Observer != nil {
					e.cfg.Observer.DeadLetters(n)
				}
				return float64(n), err
			},
			summary: func(v float64) string {
				return fmt.Sprintf("%.0f webhook deliveries in the dead-letter list (threshold %d)", v, t.DeadLetters)
			},
		})
		if t.DeadLetterMax > 0 {
			rules = append(rules, rule{
				name:      RuleDeadLettersNearMax,
				threshold: DeadLettersNearMaxFraction * float64(t.DeadLetterMax),
				value: func(ctx context.Context, _ time.Time, _ Activity) (float64, error) {
					n, err := e.cfg.DeadLetters.DeadLetterCount(ctx)
					return float64(n), err
				},
				summary: func(v float64) string {
					return fmt.Sprintf("%.0f webhook deliveries in the dead-letter list, %.0f%% of the %d kept (--dead-letter-max): beyond it the oldest are dropped; retry or delete them",
						v, 100*v/float64(t.DeadLetterMax), t.DeadLetterMax)
				},
			})
		}
	}
	if e.cfg.ClockSkew != nil {
		rules = append(rules, rule{
			name:      RuleDBClockSkew,
			threshold: t.DBClockSkew.Seconds(),
			value: func(context.Context, time.Time, Activity) (float64, error) {
				return e.cfg.ClockSkew.DBClockSkew().Seconds(), nil
			},
			summary: func(v float64) string {
				skew := time.Duration(v * float64(time.Second)).Round(time.Millisecond)
				return fmt.Sprintf("the clocks of two database servers differ by %s (threshold %s): a server ahead closes orders written through the others that much early; synchronise their clocks (NTP)", skew, t.DBClockSkew)
			},
		})
	}
	if e.cfg.BeforeClose != nil {
		rules = append(rules, beforeCloseRule(e.cfg.BeforeClose))
	}
	if e.cfg.EventSinks != nil {
		rules = append(rules, eventSinkRule(e.cfg.EventSinks))
	}
	if e.cfg.Sources != nil {
		rules = append(rules, sourceRule(e.cfg.Sources), sourceBadRowsRule(e.cfg.Sources))
	}
	if e.cfg.BlockedRows != nil {
		rules = append(rules, blockedRule(e.cfg.BlockedRows))
	}
	return rules
}

// Rules returns the names of the rules evaluated, in order.
func (e *Evaluator) Rules() []string {
	out := make([]string, len(e.rules))
	for i, r := range e.rules {
		out[i] = r.name
	}
	return out
}

// Status returns every rule's state after the last evaluation, in rule
// order. Safe for concurrent use.
func (e *Evaluator) Status() []Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Status, 0, len(e.rules))
	for _, r := range e.rules {
		out = append(out, e.status[r.name])
	}
	return out
}

// Run evaluates the rules every Interval until ctx ends, delivering webhook
// notifications in the background; it returns nil when ctx ends. Webhook
// notifications still queued then are logged and dropped.
func (e *Evaluator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if e.notifier != nil {
		wg.Add(1)
		go func() { defer wg.Done(); e.notifier.run(ctx) }()
	}
	defer wg.Wait()
	if e.cfg.Interval < 0 {
		<-ctx.Done()
		return nil
	}
	t := e.clock.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		e.Evaluate(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Evaluate runs every rule once at the clock's now and acts on each change
// of state: it logs it, tells the Observer and queues a webhook
// notification. A rule whose value cannot be read keeps its state (the
// error is logged and kept in its Status). It does nothing while Ready
// returns false. Notifications are delivered by Run.
func (e *Evaluator) Evaluate(ctx context.Context) {
	e.evalMu.Lock()
	defer e.evalMu.Unlock()
	if !e.ready {
		if e.cfg.Ready != nil && !e.cfg.Ready() {
			return
		}
		e.ready = true
	}
	now := e.clock.Now()
	a := e.cfg.Activity.Activity(now, e.cfg.Window)
	for _, r := range e.rules {
		v, err := r.value(ctx, now, a)
		e.mu.Lock()
		st := e.status[r.name]
		if err != nil {
			st.Err = err.Error()
			e.status[r.name] = st
			e.mu.Unlock()
			if ctx.Err() == nil {
				e.log.Error("alert: evaluating rule failed; it keeps its state", "rule", r.name, "err", err)
			}
			continue
		}
		was := st.Firing
		st.Value, st.Err, st.Summary = v, "", r.summary(v)
		st.Firing = v > r.threshold
		if st.Firing && !was {
			st.Since = now
		}
		started := st.Since
		if !st.Firing {
			st.Since = time.Time{}
		}
		e.status[r.name] = st
		e.mu.Unlock()
		if st.Firing == was {
			continue
		}
		if e.cfg.Observer != nil {
			e.cfg.Observer.AlertFiring(r.name, st.Firing)
		}
		n := Notification{Rule: r.name, Value: v, Threshold: r.threshold, Summary: st.Summary, StartedAt: jsonTime(started)}
		if st.Firing {
			n.State = StateFiring
			e.log.Warn("alert: firing", "rule", r.name, "value", v, "threshold", r.threshold, "summary", st.Summary)
		} else {
			n.State = StateResolved
			n.ResolvedAt = jsonTime(now)
			e.log.Info("alert: resolved", "rule", r.name, "value", v, "threshold", r.threshold, "fired_for", now.Sub(started))
		}
		if e.notifier != nil {
			e.notifier.enqueue(n)
		}
	}
}

// WebhookConfig is where and how firing and resolve notifications are sent.
type WebhookConfig struct {
	// URL is an http or https URL; empty disables notifications.
	URL string
	// Attempts per notification (default 4).
	Attempts int
	// Backoff before the second attempt, doubled after each failure
	// (default 1s).
	Backoff time.Duration
	// Timeout of one POST (default 5s).
	Timeout time.Duration
}

func (w WebhookConfig) validate() error {
	if w.URL == "" {
		return nil
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("alert: webhook URL must be an absolute http(s) URL, got %q", redact.URL(w.URL))
	}
	if w.Attempts < 0 || w.Attempts > 100 {
		return fmt.Errorf("alert: webhook attempts must be 0..100, got %d", w.Attempts)
	}
	if w.Backoff < 0 || w.Timeout < 0 {
		return errors.New("alert: webhook backoff and timeout must be >= 0")
	}
	return nil
}
