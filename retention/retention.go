// Package retention bounds what clients grow in the database: it prunes
// idempotency keys, fired and cancelled timers with their events, events
// no delivery needs, dead letters beyond a maximum and the rows of nodes
// gone for a day (Pruner), and refuses new timers beyond a maximum
// (TimerLimit).
//
// The Pruner is the one pruning loop of a node (webhook delivery used to
// prune events itself): every Interval it deletes, kind after kind, in
// batches of Batch rows (one short statement each, through
// hourglass.RetentionStore, which the stores run outside the close path),
// pausing between batches at least as long as the batch took, so pruning a
// backlog of millions uses at most about half of one connection. In a
// cluster only the leader prunes (Config.Leader).
package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// Defaults of Config: the zero value of each field means these.
const (
	// IdempotencyRetentionDefault is how long an idempotency key is kept,
	// as payment APIs do: a replay within it returns the first order.
	IdempotencyRetentionDefault = 24 * time.Hour
	TimerRetentionDefault       = 7 * 24 * time.Hour
	EventRetentionDefault       = 7 * 24 * time.Hour
	DeadLetterMaxDefault        = 100_000
	IntervalDefault             = time.Minute
	BatchDefault                = 500
	PauseDefault                = 20 * time.Millisecond
	// NodeRetention is how long the row of a node that stopped
	// heartbeating (it crashed rather than left) is kept.
	NodeRetention = 24 * time.Hour
)

// Kinds of what is pruned, the label of hourglass_pruned_total.
const (
	KindIdempotencyKeys = "idempotency_keys"
	KindTimers          = "timers"
	KindTimerEvents     = "timer_events"
	KindEvents          = "events"
	KindNodes           = "cluster_nodes"
	// KindRejectedTimerRequests are the timer requests shops wrote that
	// could not be applied (timer_request_errors), pruned after
	// TimerRetention like fired timers.
	KindRejectedTimerRequests = "timer_request_errors"
	// KindDeliveryAttempts are the attempt log's rows (hourglass.AttemptLog),
	// pruned after EventRetention like the events.
	KindDeliveryAttempts = "delivery_attempts"
)

// Store is what the Pruner needs of the database. A store that also
// implements hourglass.ClusterStore has its gone nodes pruned.
type Store interface {
	hourglass.RetentionStore
	PruneEvents(ctx context.Context, before time.Time, limit int) (int, error)
	// PruneDeliveryAttempts is hourglass.AttemptLog's.
	PruneDeliveryAttempts(ctx context.Context, before time.Time, limit int) (int, error)
	// PruneRejectedTimerRequests is hourglass.TimerRequestStore's.
	PruneRejectedTimerRequests(ctx context.Context, before time.Time, limit int) (int, error)
}

// Observer is told what was pruned, for metrics. It must be safe for
// concurrent use.
type Observer interface {
	// Pruned reports n rows of kind (a Kind constant) deleted.
	Pruned(kind string, n int)
	// DeadLettersDropped reports n dead letters dropped beyond
	// DeadLetterMax.
	DeadLettersDropped(n int)
}

// Config configures a Pruner. The zero value of each field means its
// default; a negative retention means forever.
type Config struct {
	// IdempotencyRetention: keys created longer ago are forgotten (a
	// replay after it creates a new order).
	IdempotencyRetention time.Duration
	// TimerRetention: timers fired or cancelled longer ago are deleted, and
	// timers' events written longer ago (once no delivery needs them).
	TimerRetention time.Duration
	// EventRetention: events written longer ago that no delivery needs.
	EventRetention time.Duration
	// DeadLetterMax is the most dead letters kept; beyond it the oldest are
	// dropped (negative: no limit).
	DeadLetterMax int
	// Interval between rounds; Batch rows per statement; Pause at least
	// between statements.
	Interval time.Duration
	Batch    int
	Pause    time.Duration
	// Leader, when set, says whether this node does the cluster's pruning;
	// it is asked before every statement.
	Leader func() bool
	// Clock gives each round its now and times the rounds and the pauses
	// (nil: the system clock; see hourglass.WithTimers).
	Clock    hourglass.Clock
	Logger   *slog.Logger
	Observer Observer
}

// Validate reports a configuration error, naming the field and its range.
func (c Config) Validate() error {
	for _, r := range []struct {
		name string
		d    time.Duration
	}{{"IdempotencyRetention", c.IdempotencyRetention}, {"TimerRetention", c.TimerRetention}, {"EventRetention", c.EventRetention}} {
		if r.d > 0 && r.d < time.Minute {
			return fmt.Errorf("retention: %s must be at least 1m (or negative for forever), got %s", r.name, r.d)
		}
	}
	switch {
	case c.Interval != 0 && (c.Interval < 10*time.Millisecond || c.Interval > 24*time.Hour):
		return fmt.Errorf("retention: Interval must be between 10ms and 24h, got %s", c.Interval)
	case c.Batch < 0 || c.Batch > 10_000:
		return fmt.Errorf("retention: Batch must be 0..10000, got %d", c.Batch)
	case c.Pause < 0 || c.Pause > time.Minute:
		return fmt.Errorf("retention: Pause must be 0..1m, got %s", c.Pause)
	}
	return nil
}

// Pruner deletes what outlived its retention or limit. Its methods are
// safe for concurrent use; Run is called once.
type Pruner struct {
	cfg   Config
	store Store
	nodes hourglass.ClusterStore // nil: not a cluster store
	clock hourglass.TimerClock
	log   *slog.Logger
	obs   Observer
}

// New returns a Pruner over store; it prunes nothing until Run or Prune.
func New(store Store, cfg Config) (*Pruner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.IdempotencyRetention = cmp.Or(cfg.IdempotencyRetention, IdempotencyRetentionDefault)
	cfg.TimerRetention = cmp.Or(cfg.TimerRetention, TimerRetentionDefault)
	cfg.EventRetention = cmp.Or(cfg.EventRetention, EventRetentionDefault)
	cfg.DeadLetterMax = cmp.Or(cfg.DeadLetterMax, DeadLetterMaxDefault)
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.Pause = cmp.Or(cfg.Pause, PauseDefault)
	p := &Pruner{cfg: cfg, store: store, clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger, obs: cfg.Observer}
	// A store shared by several processes records them (ClusterStore);
	// one without (SQLite: one process) has no nodes to prune.
	if cs, ok := store.(hourglass.ClusterStore); ok {
		p.nodes = cs
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	return p, nil
}

// Run prunes every Interval on the clock until ctx ends, then returns nil.
// A database error is logged and the kind is tried again at the next round.
func (p *Pruner) Run(ctx context.Context) error {
	t := p.clock.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		p.Prune(ctx)
	}
}

// Report is what one round deleted, by kind (DeadLetters: dropped).
type Report struct {
	IdempotencyKeys, Timers, TimerEvents, Events, DeadLetters, Nodes, RejectedTimerRequests, DeliveryAttempts int
}

// Prune runs one round now: each kind in batches until a batch deletes
// fewer than Batch rows, ctx ends or this node stops leading. Dead letters
// are trimmed before events are pruned, so the events they pinned go in
// the same round. Errors are logged, not returned.
func (p *Pruner) Prune(ctx context.Context) Report {
	var r Report
	now := p.clock.Now()
	if d := p.cfg.IdempotencyRetention; d > 0 {
		r.IdempotencyKeys = p.drain(ctx, KindIdempotencyKeys, func(limit int) (int, error) {
			return p.store.PruneIdempotencyKeys(ctx, now.Add(-d), limit)
		})
	}
	if d := p.cfg.TimerRetention; d > 0 {
		p.batches(ctx, KindTimers, func(limit int) (int, error) {
			timers, events, err := p.store.PruneTimers(ctx, now.Add(-d), limit)
			r.Timers += timers
			r.TimerEvents += events
			p.obs.Pruned(KindTimers, timers)
			p.obs.Pruned(KindTimerEvents, events)
			return max(timers, events), err // another batch while either was full
		})
	}
	if d := p.cfg.TimerRetention; d > 0 {
		r.RejectedTimerRequests = p.drain(ctx, KindRejectedTimerRequests, func(limit int) (int, error) {
			return p.store.PruneRejectedTimerRequests(ctx, now.Add(-d), limit)
		})
	}
	if m := p.cfg.DeadLetterMax; m > 0 {
		r.DeadLetters = p.drainDeadLetters(ctx, m)
	}
	if d := p.cfg.EventRetention; d > 0 {
		r.Events = p.drain(ctx, KindEvents, func(limit int) (int, error) {
			return p.store.PruneEvents(ctx, now.Add(-d), limit)
		})
		r.DeliveryAttempts = p.drain(ctx, KindDeliveryAttempts, func(limit int) (int, error) {
			return p.store.PruneDeliveryAttempts(ctx, now.Add(-d), limit)
		})
	}
	if p.nodes != nil {
		r.Nodes = p.drain(ctx, KindNodes, func(limit int) (int, error) {
			return p.nodes.PruneNodes(ctx, NodeRetention, limit)
		})
	}
	if r != (Report{}) {
		p.log.Info("retention: pruned", "idempotency_keys", r.IdempotencyKeys, "timers", r.Timers, "timer_events", r.TimerEvents,
			"events", r.Events, "dead_letters_dropped", r.DeadLetters, "cluster_nodes", r.Nodes, "timer_request_errors", r.RejectedTimerRequests, "delivery_attempts", r.DeliveryAttempts)
	}
	return r
}

// drainDeadLetters trims the dead letters to DeadLetterMax, batch by
// batch; each dropped one is a delivery that will never be retried, so it
// is logged at WARN and counted apart.
func (p *Pruner) drainDeadLetters(ctx context.Context, keep int) int {
	total := 0
	p.batches(ctx, "dead letters", func(limit int) (int, error) {
		n, err := p.store.TrimDeadLetters(ctx, keep, limit)
		total += n
		p.obs.DeadLettersDropped(n)
		return n, err
	})
	if total > 0 {
		p.log.Warn("retention: dropped the oldest dead letters beyond the maximum", "dropped", total, "max", keep)
	}
	return total
}

// drain runs batch until it deletes fewer than Batch rows, counting what
// it deleted as kind.
func (p *Pruner) drain(ctx context.Context, kind string, batch func(limit int) (int, error)) int {
	total := 0
	p.batches(ctx, kind, func(limit int) (int, error) {
		n, err := batch(limit)
		total += n
		p.obs.Pruned(kind, n)
		return n, err
	})
	return total
}

// batches calls batch(Batch) while it returns Batch, pausing on the clock
// between calls at least Pause and as long as the call took.
func (p *Pruner) batches(ctx context.Context, what string, batch func(limit int) (int, error)) {
	for ctx.Err() == nil && p.leading() {
		start := p.clock.Now()
		n, err := batch(p.cfg.Batch)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Error("retention: pruning failed; retrying at the next round", "kind", what, "err", err)
			}
			return
		}
		if n < p.cfg.Batch {
			return
		}
		if timing.Sleep(ctx, p.clock, max(p.cfg.Pause, p.clock.Now().Sub(start))) != nil {
			return
		}
	}
}

func (p *Pruner) leading() bool { return p.cfg.Leader == nil || p.cfg.Leader() }

type nopObserver struct{}

func (nopObserver) Pruned(string, int)     {}
func (nopObserver) DeadLettersDropped(int) {}
