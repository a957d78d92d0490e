// Package dispatch (part of the timing core, package timing) hands timers
// fired by an in-memory scheduler to the close path without ever blocking the scheduler's timing loop: an unbounded FIFO
// drained by a few workers that deliver in batches and retry a failed batch
// with capped exponential backoff. Delivery is at-least-once.
package dispatch

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// Defaults of Config.
const (
	// WorkersDefault is enough deliveries in flight that, in a burst, the
	// store always has the next batches queued while it commits one.
	WorkersDefault  = 4
	BatchDefault    = 512
	RetryMaxDefault = 5 * time.Second
)

// Config configures a Dispatcher; zero values mean the defaults.
type Config struct {
	Workers  int           // concurrent deliveries
	Batch    int           // most timers per delivery
	RetryMax time.Duration // cap of the backoff after a failed delivery
	Logger   *slog.Logger
	// Clock dates progress for Oldest and times the backoff (default the
	// system clock).
	Clock hourglass.Clock
}

// Dispatcher is safe for concurrent use.
type Dispatcher struct {
	cfg    Config
	clock  hourglass.TimerClock
	log    *slog.Logger
	mu     sync.Mutex
	queue  []hourglass.DueItem
	closed bool
	// inflight holds the earliest deadline of each batch being delivered,
	// by worker, so Oldest counts what has left the queue but not yet
	// been delivered.
	inflight []int64
	// progress is when a delivery last completed, or when the dispatcher
	// last went from idle to busy (unix ms).
	progress int64
	ready    chan struct{} // holds a token while queue is non-empty or closed
}

// New returns a dispatcher; Run starts its workers.
func New(cfg Config) *Dispatcher {
	cfg.Workers = cmp.Or(cfg.Workers, WorkersDefault)
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	d := &Dispatcher{cfg: cfg, clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger, ready: make(chan struct{}, 1)}
	if d.log == nil {
		d.log = slog.Default()
	}
	return d
}

// Push queues fired timers. It never blocks.
func (d *Dispatcher) Push(timers []hourglass.DueItem) {
	if len(timers) == 0 {
		return
	}
	d.mu.Lock()
	if len(d.queue) == 0 && !d.busy() {
		d.progress = hourglass.UnixMilli(d.clock.Now())
	}
	d.queue = append(d.queue, timers...)
	d.mu.Unlock()
	d.signal()
}

// busy reports whether a delivery is in flight; d.mu must be held.
func (d *Dispatcher) busy() bool {
	for _, dl := range d.inflight {
		if dl != math.MaxInt64 {
			return true
		}
	}
	return false
}

// Oldest returns the earliest deadline among the timers queued or being
// delivered, and when the dispatcher last made progress (a delivery
// completed, or it went from idle to busy), both in unix ms; ok is false
// when there are none. It scans the queue (the queue is in firing order
// only until a failed batch is pushed back), so it costs O(queued): call it
// about once a second, not per timer.
func (d *Dispatcher) Oldest() (deadline, progress int64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	progress = d.progress
	deadline = math.MaxInt64
	for _, t := range d.queue {
		deadline = min(deadline, hourglass.UnixMilli(t.At))
	}
	for _, dl := range d.inflight {
		deadline = min(deadline, dl)
	}
	return deadline, progress, deadline != math.MaxInt64
}

// Len returns the number of queued timers.
func (d *Dispatcher) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// Upcoming appends to ids those of the first n queued timers, in the order
// the workers will take them (a failed batch is queued again behind them),
// and returns it. It costs O(n).
func (d *Dispatcher) Upcoming(ids []int64, n int) []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range d.queue[:min(n, len(d.queue))] {
		ids = append(ids, t.ID)
	}
	return ids
}

func (d *Dispatcher) signal() {
	select {
	case d.ready <- struct{}{}:
	default:
	}
}

// Run delivers queued timers with Workers goroutines until ctx ends. Timers
// still queued then are dropped: in-memory schedulers are refilled from the
// database on the next start.
func (d *Dispatcher) Run(ctx context.Context, deliver hourglass.Deliver) {
	d.mu.Lock()
	d.closed = false
	d.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		d.signal()
	})
	defer stop()
	d.mu.Lock()
	d.inflight = make([]int64, d.cfg.Workers)
	for i := range d.inflight {
		d.inflight[i] = math.MaxInt64
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for w := range d.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx, w, deliver)
		}()
	}
	wg.Wait()
}

func (d *Dispatcher) work(ctx context.Context, worker int, deliver hourglass.Deliver) {
	backoff := timing.Backoff{Min: 10 * time.Millisecond, Max: d.cfg.RetryMax}
	for {
		batch, ok := d.pop(worker)
		if !ok {
			return
		}
		err := deliver(ctx, batch)
		if err != nil {
			d.Push(batch) // queued again before it stops counting as in flight
		}
		d.mu.Lock()
		d.inflight[worker] = math.MaxInt64
		if err == nil {
			d.progress = hourglass.UnixMilli(d.clock.Now())
		}
		d.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := backoff.Next()
			d.log.Error("dispatch: delivery failed; retrying", "timers", len(batch), "retry_in", wait, "err", err)
			if timing.Sleep(ctx, d.clock, wait) != nil {
				return
			}
			continue
		}
		backoff.Reset()
	}
}

// pop blocks until timers are queued and returns up to Batch of them,
// recording their earliest deadline as the worker's in-flight one; ok is
// false once Run's context has ended.
func (d *Dispatcher) pop(worker int) (batch []hourglass.DueItem, ok bool) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			d.signal() // wake the other workers too
			return nil, false
		}
		if n := min(d.cfg.Batch, len(d.queue)); n > 0 {
			batch = append([]hourglass.DueItem(nil), d.queue[:n]...)
			earliest := int64(math.MaxInt64)
			for _, t := range batch {
				earliest = min(earliest, hourglass.UnixMilli(t.At))
			}
			d.inflight[worker] = earliest
			if n == len(d.queue) {
				d.queue = nil
			} else {
				d.queue = d.queue[n:]
			}
			more := len(d.queue) > 0
			d.mu.Unlock()
			if more {
				d.signal()
			}
			return batch, true
		}
		d.mu.Unlock()
		<-d.ready
	}
}
