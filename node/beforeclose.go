package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/metrics"
)

// The payment check before the close of hourglass's own orders: the
// engine hands every due order to a checkGate (engine.Gate) instead of
// closing it; the gate asks --before-close-url (package beforeclose) and
// closes, pays or extends the order as the answer says.

// Values of BeforeClose.OnError.
const (
	// OnErrorWait keeps an order whose check fails pending, checked again
	// with backoff until an answer comes: never closed blind.
	OnErrorWait = "wait"
	// OnErrorClose closes an order once its check failed MaxFailures
	// times in a row.
	OnErrorClose = "close"
)

// Defaults of BeforeClose.
const (
	BeforeCloseMaxFailuresDefault = 10
	// BeforeCloseConcurrencyDefault is how many checks run at once, so a
	// burst of due orders is not serialised behind 2 s timeouts.
	BeforeCloseConcurrencyDefault = 32
	// BeforeCloseQueueMax is how many due orders wait for a check at most;
	// past it an order is left pending for the sweeper to hand over again.
	BeforeCloseQueueMax = 10000
	// BeforeCloseHeldMax bounds the orders held at once (queued, being
	// checked, or waiting to be checked again after a failure); past it
	// the gate takes no more until some are settled.
	BeforeCloseHeldMax = 100000
)

// BeforeClose configures the payment check before hourglass closes its own
// orders. The zero value (no URL) checks nothing.
type BeforeClose struct {
	// URL is POSTed {"order":{…}} before each close (http or https).
	URL string
	// Secret signs each check like a webhook delivery (Hourglass-Signature).
	Secret string
	// OnError is OnErrorWait (default) or OnErrorClose.
	OnError string
	// MaxFailures is the failures in a row after which OnErrorClose closes
	// an order (default BeforeCloseMaxFailuresDefault).
	MaxFailures int
	// Timeout bounds one check (default beforeclose.TimeoutDefault).
	Timeout time.Duration
	// Concurrency is how many checks run at once (default
	// BeforeCloseConcurrencyDefault).
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
	case "", OnErrorWait, OnErrorClose:
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

// checkGate is the engine.Gate of the payment check. Each due order is
// checked by one of Concurrency workers; an order is held (queued, being
// checked, or waiting for its retry) once, however often the scheduler
// and the sweeper hand it over. Safe for concurrent use.
type checkGate struct {
	cfg     BeforeClose
	store   hourglass.Store
	checker *beforeclose.Checker
	clock   hourglass.TimerClock
	log     *slog.Logger
	queue   chan gateJob

	mu   sync.Mutex
	held map[int64]struct{}
}

// gateJob is one due order and the engine's close for it.
type gateJob struct {
	id    int64
	close func(ctx context.Context, orders []int64) error
}

var _ engine.Gate = (*checkGate)(nil)

func newCheckGate(cfg BeforeClose, store hourglass.Store, checker *beforeclose.Checker, clock hourglass.Clock, log *slog.Logger) *checkGate {
	cfg.OnError = cmp.Or(cfg.OnError, OnErrorWait)
	cfg.MaxFailures = cmp.Or(cfg.MaxFailures, BeforeCloseMaxFailuresDefault)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, BeforeCloseConcurrencyDefault)
	return &checkGate{cfg: cfg, store: store, checker: checker, clock: hourglass.WithTimers(clock), log: log,
		queue: make(chan gateJob, BeforeCloseQueueMax), held: map[int64]struct{}{}}
}

// Hold implements engine.Gate: it queues the orders not held yet and
// returns how many it took; an order the queue (or BeforeCloseHeldMax)
// has no room for is left to the sweeper.
func (g *checkGate) Hold(orders []int64, close func(ctx context.Context, orders []int64) error) (taken int) {
	for _, id := range orders {
		g.mu.Lock()
		_, held := g.held[id]
		take := !held && len(g.held) < BeforeCloseHeldMax
		if take {
			g.held[id] = struct{}{}
		}
		g.mu.Unlock()
		if take && g.enqueue(gateJob{id: id, close: close}) {
			taken++
		}
	}
	return taken
}

// enqueue queues a held job and reports true, or releases it when the
// queue is full.
func (g *checkGate) enqueue(j gateJob) bool {
	select {
	case g.queue <- j:
		return true
	default:
		g.release(j.id)
		return false
	}
}

func (g *checkGate) release(id int64) {
	g.mu.Lock()
	delete(g.held, id)
	g.mu.Unlock()
}

// run runs the workers until ctx ends.
func (g *checkGate) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range g.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-g.queue:
					g.check(ctx, j)
				}
			}
		}()
	}
	wg.Wait()
}

// checkBody is what a check POSTs: the order as the API's order object
// (as stored: status pending_payment, its deadline passed).
type checkBody struct {
	Order json.RawMessage `json:"order"`
}

// check asks about one order and acts on the answer.
func (g *checkGate) check(ctx context.Context, j gateJob) {
	key := strconv.FormatInt(j.id, 10)
	if wait := g.checker.Wait(key); wait > 0 {
		// Extended by the last answer to a moment from then: asked
		// again once its step passed, not at every deadline it sets.
		g.clock.AfterFunc(wait, func() { g.enqueue(j) })
		return
	}
	o, err := g.store.Order(ctx, j.id)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("hourglass: payment check: reading the order failed; the sweeper hands it over again", "order", j.id, "err", err)
		}
		g.release(j.id)
		return
	}
	if o.Status != hourglass.StatePendingPayment || o.Payable(g.clock.Now()) {
		// Paid, cancelled or closed meanwhile, or extended (its old
		// deadline's timer): nothing to ask.
		g.checker.Succeeded(key)
		g.release(j.id)
		return
	}
	body, _ := json.Marshal(checkBody{Order: hourglass.MarshalOrder(o)}) // a RawMessage of valid JSON: cannot fail
	// No cap here: the store refuses a deadline later than
	// MaxOrderLifetime after the order's creation (its first deadline is
	// not stored, and is at most that), a failed check (errAnswer).
	a, err := g.checker.Ask(ctx, g.cfg.URL, body, time.Time{})
	if err == nil {
		err = g.act(ctx, j, a)
	}
	if err != nil {
		if ctx.Err() != nil {
			g.release(j.id) // shutting down: the next start checks it
			return
		}
		g.failed(ctx, j, key, err)
		return
	}
	if a.Action == beforeclose.ActionExtend {
		g.checker.Extended(key)
	} else {
		g.checker.Succeeded(key)
	}
	g.release(j.id)
}

// errAnswer marks an answer the store refused (an extend to a deadline
// that is not allowed): a failed check.
var errAnswer = errors.New("the answer cannot be applied")

// act does what answer a says for j's order. An error is a failed check;
// a failure of the store is logged and left to the sweeper (nil).
func (g *checkGate) act(ctx context.Context, j gateJob, a beforeclose.Answer) error {
	switch a.Action {
	case beforeclose.ActionClose:
		if err := j.close(ctx, []int64{j.id}); err != nil {
			g.log.Warn("hourglass: payment check: close failed; the sweeper checks the order again", "order", j.id, "err", err)
		}
	case beforeclose.ActionPaid:
		_, err := g.store.PayDueOrder(ctx, j.id, a.PaymentID)
		switch hourglass.ErrorCode(err) {
		case "":
			g.log.Info("hourglass: payment check: the order was paid; marked paid instead of closed", "order", j.id, "payment_id", a.PaymentID)
		case hourglass.CodeOrderNotPayable, hourglass.CodeNotFound:
			g.log.Info("hourglass: payment check answered paid; the order is no longer pending", "order", j.id, "err", err)
		default:
			g.log.Warn("hourglass: payment check answered paid; marking it paid failed; the sweeper checks it again", "order", j.id, "err", err)
		}
	case beforeclose.ActionExtend:
		_, err := g.store.ExtendOrder(ctx, hourglass.ExtendOrderParams{ID: j.id, Deadline: a.Deadline, Overdue: true})
		switch hourglass.ErrorCode(err) {
		case "":
			g.log.Info("hourglass: payment check: order extended", "order", j.id, "deadline", a.Deadline, "capped", a.Capped)
		case hourglass.CodeInvalidArgument:
			return fmt.Errorf("%w: extend to %s: %s", errAnswer, a.Deadline.Format(hourglass.TimeFormat), hourglass.ErrorMessage(err))
		case hourglass.CodeInvalidTransition, hourglass.CodeNotFound:
			g.log.Info("hourglass: payment check answered extend; the order is no longer pending", "order", j.id, "err", err)
		default:
			g.log.Warn("hourglass: payment check answered extend; extending failed; the sweeper checks it again", "order", j.id, "err", err)
		}
	}
	return nil
}

// failed records a failed check of j's order: with OnErrorClose and
// MaxFailures in a row it closes the order; otherwise it checks it again
// after the backoff, the order staying pending meanwhile.
func (g *checkGate) failed(ctx context.Context, j gateJob, key string, cause error) {
	n, retryIn := g.checker.Failed(key)
	if g.cfg.OnError == OnErrorClose && n >= g.cfg.MaxFailures {
		g.log.Warn("hourglass: payment check failed --before-close-max-failures times in a row; closing the order anyway (--before-close-on-error close)",
			"order", j.id, "failures", n, "err", cause)
		if err := j.close(ctx, []int64{j.id}); err != nil {
			g.log.Warn("hourglass: close failed; the sweeper hands the order over again", "order", j.id, "err", err)
		}
		g.checker.Succeeded(key)
		g.release(j.id)
		return
	}
	level := slog.LevelDebug
	if n == 1 || n%10 == 0 {
		level = slog.LevelWarn
	}
	g.log.Log(ctx, level, "hourglass: payment check failed; the order stays pending and is checked again", "order", j.id, "failures", n, "retry_in", retryIn, "err", cause)
	g.clock.AfterFunc(retryIn, func() { g.enqueue(j) })
}

// newBeforeClose returns the gate of the payment check cfg describes, with
// the node's one Checker (nil, and no check, without a URL).
func newBeforeClose(cfg BeforeClose, store hourglass.Store, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*checkGate, error) {
	if cfg.URL == "" {
		return nil, nil
	}
	checker, err := newChecker(cfg, m, clock, log)
	if err != nil {
		return nil, err
	}
	log.Info("hourglass: payment check before closes", "url", redact.URL(cfg.URL), "on_error", cmp.Or(cfg.OnError, OnErrorWait))
	return newCheckGate(cfg, store, checker, clock, log), nil
}

// newChecker returns a beforeclose.Checker signing with cfg.Secret,
// reporting to the metrics. A node has one (the gate's checker), so that
// the before_close_failures alert sees every check it makes: other checks
// of the node (shops' rows) share it.
func newChecker(cfg BeforeClose, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*beforeclose.Checker, error) {
	checker, err := beforeclose.New(beforeclose.Config{Secret: cfg.Secret, Timeout: cfg.Timeout, Clock: clock, Observer: m, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--before-close-*: %w", err)
	}
	return checker, nil
}

// failures returns the source of the before_close_failures alert: nil
// (no rule) without a check.
func (g *checkGate) failures() alert.FailureSource {
	if g == nil {
		return nil
	}
	return g.checker
}

// start runs the gate's workers until ctx ends (nothing when g is nil);
// wait blocks until they stopped.
func (g *checkGate) start(ctx context.Context) (wait func()) {
	if g == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.run(ctx)
	}()
	return func() { <-done }
}
