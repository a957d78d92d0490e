// Package requests applies the timer requests shops write to hourglass's
// timer_requests table in their own transactions (package txtimer): a loop
// per node that asks the store to apply the oldest committed requests
// (hourglass.TimerRequestStore.ApplyTimerRequests: one transaction, exactly
// once across nodes, in seq order per key, announcing what it armed and
// cancelled on the store's due feed, which the engine follows), and counts
// what it applied, rejected and how late.
// It runs when the store says requests were committed (PostgreSQL's
// NOTIFY) and every PollInterval otherwise (MySQL), and at once again while
// a batch comes back full.
//
// It imports the root package and timing only; cmd (the node) wires it to
// the store and the engine.
package requests

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// Defaults of Config.
const (
	BatchDefault = 500
	// PollIntervalDefault is how often a store that cannot tell when
	// requests were written (MySQL) is asked: it bounds the lag from
	// commit to applied, which the issue wants under 250 ms at p99.
	PollIntervalDefault = 100 * time.Millisecond
	// NotifiedPollDefault is how often a store that notifies is asked
	// anyway, in case a notification was lost.
	NotifiedPollDefault = time.Second
	RetryMaxDefault     = 5 * time.Second
)

// Observer is told what the applier did; metrics implements it.
type Observer interface {
	TimerRequestsApplied(applied, rejected int, lags []time.Duration)
}

// Limit is --timer-max as the applier keeps it: retention.TimerLimit,
// which bounds PUT /v1/timers/{key} too.
type Limit interface {
	// TimerRoom returns how many timers may still be created, and the
	// maximum.
	TimerRoom(ctx context.Context) (room, max int64)
	// TimersCreated counts n timers created since.
	TimersCreated(n int)
}

// Config configures an Applier; Store is required.
type Config struct {
	Store    hourglass.TimerRequestStore
	Observer Observer
	// Limit, when set, bounds the timers the requests create
	// (--timer-max): an arm of a new key beyond it is rejected, as PUT
	// answers 409.
	Limit Limit
	// Batch is the most requests per transaction (default BatchDefault).
	Batch int
	// PollInterval is how often the store is asked when it does not
	// notify (default PollIntervalDefault); a notifying store is asked
	// every NotifiedPollDefault besides.
	PollInterval time.Duration
	// RetryMax caps the backoff after a failed transaction (default 5 s).
	RetryMax time.Duration
	Clock    hourglass.Clock
	Logger   *slog.Logger
}

// Validate reports a configuration error naming the field.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("requests: Store is required")
	case c.Batch < 0 || c.Batch > 10000:
		return fmt.Errorf("requests: Batch must be 1 to 10000, got %d", c.Batch)
	case c.PollInterval < 0 || c.PollInterval > time.Minute:
		return fmt.Errorf("requests: PollInterval must be up to 1m, got %s", c.PollInterval)
	}
	return nil
}

// Applier applies timer requests until its Run ends.
type Applier struct {
	cfg   Config
	clock hourglass.TimerClock
	log   *slog.Logger
}

// New returns an Applier; it does nothing until Run.
func New(cfg Config) (*Applier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	return &Applier{cfg: cfg, clock: hourglass.WithTimers(cfg.Clock), log: cmp.Or(cfg.Logger, slog.Default())}, nil
}

type nopObserver struct{}

func (nopObserver) TimerRequestsApplied(int, int, []time.Duration) {}

// Run applies requests until ctx ends, and returns nil then. A failed
// transaction is logged and tried again after a backoff; it changed
// nothing.
func (a *Applier) Run(ctx context.Context) error {
	written := a.cfg.Store.TimerRequestsWritten()
	poll := a.cfg.PollInterval
	if written != nil {
		poll = NotifiedPollDefault
	}
	backoff := timing.Backoff{Min: 50 * time.Millisecond, Max: a.cfg.RetryMax}
	for ctx.Err() == nil {
		p := hourglass.TimerRequestsParams{Limit: a.cfg.Batch, Room: hourglass.NoTimerLimit}
		if a.cfg.Limit != nil {
			p.Room, p.Max = a.cfg.Limit.TimerRoom(ctx)
		}
		res, err := a.cfg.Store.ApplyTimerRequests(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait := backoff.Next()
			a.log.Error("requests: applying timer requests failed; retrying", "retry_in", wait, "err", err)
			if timing.Sleep(ctx, a.clock, wait) != nil {
				return nil
			}
			continue
		}
		backoff.Reset()
		a.apply(res)
		if res.Full {
			continue // more are waiting
		}
		t := a.clock.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-written:
		case <-t.C():
		}
		t.Stop()
	}
	return nil
}

// apply tells the observer what one transaction did.
func (a *Applier) apply(res hourglass.TimerRequestsApplied) {
	if res.Created > 0 && a.cfg.Limit != nil {
		a.cfg.Limit.TimersCreated(res.Created)
	}
	if res.Applied+res.Rejected > 0 {
		a.cfg.Observer.TimerRequestsApplied(res.Applied, res.Rejected, res.Lags)
	}
	if res.Rejected > 0 {
		a.log.Warn("requests: timer requests rejected; GET /v1/timer-requests/rejected lists them with their reasons", "rejected", res.Rejected)
	}
}
