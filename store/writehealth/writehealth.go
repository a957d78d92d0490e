// Package writehealth tracks whether a server store's writes commit, for
// /readyz: a write that fails because the database is unreachable or
// refuses writes (a lost connection, a server restarting, a read-only
// replica after a failover) marks the store unhealthy until a write commits
// again, and while it is unhealthy a probe write runs every interval, so
// readiness comes back by itself when the database does, with no traffic.
package writehealth

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
)

// Tracker holds the last storage failure of a store's writes. Its methods
// are safe for concurrent use.
type Tracker struct {
	err   atomic.Pointer[hourglass.Error]
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	close sync.Once
}

// Start returns a tracker whose probe goroutine calls probe every interval
// while writes fail; Stop ends it.
func Start(interval time.Duration, probe func(ctx context.Context) error) *Tracker {
	t := &Tracker{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go t.run(interval, probe)
	return t
}

// Record notes the outcome of a write: an unavailable *hourglass.Error marks
// the store unhealthy, nil marks it healthy, any other error (a refusal, a
// bug) says nothing about the database and is ignored.
func (t *Tracker) Record(err error) {
	if err == nil {
		if t.err.Load() != nil {
			t.err.Store(nil)
		}
		return
	}
	if hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
		return
	}
	e := &hourglass.Error{Code: hourglass.CodeUnavailable, Message: "database writes are failing: " + hourglass.ErrorMessage(err)}
	if t.err.Swap(e) == nil {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// Err returns nil while writes commit, or the unavailable error of the last
// failed write until one commits again.
func (t *Tracker) Err() error {
	if e := t.err.Load(); e != nil {
		return e
	}
	return nil
}

func (t *Tracker) run(interval time.Duration, probe func(ctx context.Context) error) {
	defer close(t.done)
	for {
		select {
		case <-t.stop:
			return
		case <-t.wake:
		}
		for t.err.Load() != nil {
			timer := time.NewTimer(interval)
			select {
			case <-t.stop:
				timer.Stop()
				return
			case <-timer.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			t.Record(probe(ctx))
			cancel()
		}
	}
}

// Stop ends the probe goroutine. It is idempotent.
func (t *Tracker) Stop() {
	t.close.Do(func() { close(t.stop); <-t.done })
}
