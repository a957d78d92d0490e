package beforeclose

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
)

// The Gate is the one payment check before a close, for hourglass's own
// orders (Hold: the engine hands it due orders instead of closing them)
// and for shops' rows (Check, called by package source for each due row).
// It holds the node's one Checker and the answer policy both share: close
// closes; paid does not close; extend arms again, no sooner than the
// Checker's step after a run of extends; a failure is retried with
// backoff, or with OnErrorClose closes after MaxFailures in a row.

// Values of Policy.OnError.
const (
	// OnErrorWait keeps a subject whose check fails pending, checked again
	// with backoff until an answer comes: never closed blind.
	OnErrorWait = "wait"
	// OnErrorClose closes a subject once its check failed MaxFailures
	// times in a row.
	OnErrorClose = "close"
)

// Defaults and bounds of a Gate.
const (
	// MaxFailuresDefault is Policy.MaxFailures' default.
	MaxFailuresDefault = 10
	// ConcurrencyDefault is how many checks run at once (GateConfig.
	// Concurrency; a source's batch of due rows too), so a burst of due
	// orders is not serialised behind 2 s timeouts.
	ConcurrencyDefault = 32
	// QueueMax is how many due orders wait for a check at most; past it
	// an order is left pending for the sweeper to hand over again.
	QueueMax = 10000
	// HeldMax bounds the orders held at once (queued, being checked, or
	// waiting to be checked again after a failure); past it the gate
	// takes no more until some are settled.
	HeldMax = 100000
)

// Policy is what a failing check does. The zero value waits.
type Policy struct {
	// OnError is OnErrorWait (default) or OnErrorClose.
	OnError string
	// MaxFailures is the failures in a row after which OnErrorClose
	// closes (default MaxFailuresDefault).
	MaxFailures int
}

// OrderStore is the part of the store the check of orders needs: it
// reads a due order and marks it paid or extends it as an answer says.
type OrderStore interface {
	Order(ctx context.Context, id int64) (hourglass.Order, error)
	PayDueOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error)
	ExtendOrder(ctx context.Context, p hourglass.ExtendOrderParams) (hourglass.Order, error)
}

// GateConfig configures a Gate. The zero value of each field means its
// default.
type GateConfig struct {
	// Checker configures the Gate's one Checker.
	Checker Config
	// Concurrency is how many orders are checked at once (default
	// ConcurrencyDefault).
	Concurrency int
	// Orders, URL and Policy are the check of hourglass's own orders:
	// Hold asks URL about each, through Orders. Without Orders the Gate
	// checks rows only (Check) and Run has nothing to do.
	Orders OrderStore
	URL    string
	Policy Policy
}

// Gate is the payment check before a close. One per node; safe for
// concurrent use.
type Gate struct {
	cfg     GateConfig
	checker *Checker
	clock   hourglass.TimerClock
	log     *slog.Logger
	queue   chan orderJob

	mu   sync.Mutex
	held map[int64]struct{}
}

// orderJob is one due order and the engine's close for it, told the
// check's decision (recorded as the close's cause).
type orderJob struct {
	id    int64
	close func(ctx context.Context, orders []int64, cause hourglass.CloseCause) error
}

// NewGate returns a Gate. Errors: an invalid configuration (its Checker's,
// a negative Concurrency).
func NewGate(cfg GateConfig) (*Gate, error) {
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("beforeclose: Concurrency must be >= 0, got %d", cfg.Concurrency)
	}
	checker, err := New(cfg.Checker)
	if err != nil {
		return nil, err
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	return &Gate{cfg: cfg, checker: checker, clock: hourglass.WithTimers(cfg.Checker.Clock), log: cmp.Or(cfg.Checker.Logger, slog.Default()),
		queue: make(chan orderJob, QueueMax), held: map[int64]struct{}{}}, nil
}

// Checker returns the Gate's Checker (its failure bookkeeping).
func (g *Gate) Checker() *Checker { return g.checker }

// FailingSince is the Checker's: when the oldest ongoing run of failed
// checks began (the before_close_failures alert).
func (g *Gate) FailingSince() (time.Time, bool) { return g.checker.FailingSince() }

// Request is one check.
type Request struct {
	// Key names the subject in the Checker's bookkeeping.
	Key string
	// URL is asked; Body is POSTed.
	URL  string
	Body []byte
	// Latest caps an extend (zero: no cap).
	Latest time.Time
	Policy Policy
	// Apply carries out a paid or an extend answer (nil: the caller
	// does, from the Verdict); an error is a failed check (an answer that
	// cannot be applied).
	Apply func(ctx context.Context, a Answer) error
	// Subject names what is checked in logs ("order", "row"); Attrs
	// identify it ("order", 42).
	Subject string
	Attrs   []any
}

// Verdict is what a check decided.
type Verdict struct {
	// Close: close the subject now (answered close, or failed
	// Policy.MaxFailures times in a row with OnErrorClose).
	Close bool
	// Answer is the check's valid answer (zero after a failure).
	Answer Answer
	// RetryAt is when to check again: after a failure, its backoff; after
	// an extend, the later of its deadline and the Checker's step. Zero
	// otherwise.
	RetryAt time.Time
	// Err is why the check failed (nil: it did not).
	Err error
	// Cancelled: ctx ended during the check; nothing was recorded.
	Cancelled bool
}

// Check asks r.URL about one subject, applies the answer (r.Apply) and
// keeps the Checker's bookkeeping (Failed, Extended, Succeeded). Safe for
// concurrent use.
func (g *Gate) Check(ctx context.Context, r Request) Verdict {
	a, err := g.checker.Ask(ctx, r.URL, r.Body, r.Latest)
	if err == nil && r.Apply != nil && a.Action != ActionClose {
		err = r.Apply(ctx, a)
	}
	if err != nil {
		if ctx.Err() != nil {
			return Verdict{Err: err, Cancelled: true} // shutting down: the next start checks it
		}
		return g.failed(ctx, r, err)
	}
	switch a.Action {
	case ActionClose:
		g.checker.Succeeded(r.Key)
		return Verdict{Close: true, Answer: a}
	case ActionExtend:
		if a.Capped {
			g.log.Warn("beforeclose: payment check extended past the latest deadline allowed; capped", append(r.Attrs, "deadline", a.Deadline)...)
		}
		step := g.clock.Now().Add(g.checker.Extended(r.Key))
		return Verdict{Answer: a, RetryAt: later(a.Deadline, step)}
	default: // paid
		g.checker.Succeeded(r.Key)
		return Verdict{Answer: a}
	}
}

// failed records a failed check of r: with OnErrorClose and MaxFailures
// in a row it closes; otherwise it is checked again after the backoff.
func (g *Gate) failed(ctx context.Context, r Request, cause error) Verdict {
	n, retryIn := g.checker.Failed(r.Key)
	if r.Policy.OnError == OnErrorClose && n >= cmp.Or(r.Policy.MaxFailures, MaxFailuresDefault) {
		g.log.Warn(fmt.Sprintf("beforeclose: payment check failed %d times in a row; closing the %s anyway (on error: close)", n, r.Subject),
			append(r.Attrs, "failures", n, "err", cause)...)
		g.checker.Succeeded(r.Key)
		return Verdict{Close: true, Err: cause}
	}
	level := slog.LevelDebug
	if n == 1 || n%10 == 0 {
		level = slog.LevelWarn
	}
	g.log.Log(ctx, level, fmt.Sprintf("beforeclose: payment check failed; the %s stays pending and is checked again", r.Subject),
		append(r.Attrs, "failures", n, "retry_in", retryIn, "err", cause)...)
	return Verdict{RetryAt: g.clock.Now().Add(retryIn), Err: cause}
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// Hold takes due orders the engine would close now (engine.Gate): it
// queues those not held yet and returns how many it took; an order the
// queue (or HeldMax) has no room for is left to the sweeper. Each is
// held once, however often the scheduler and the sweeper hand it over.
func (g *Gate) Hold(orders []int64, close func(ctx context.Context, orders []int64, cause hourglass.CloseCause) error) (taken int) {
	for _, id := range orders {
		g.mu.Lock()
		_, held := g.held[id]
		take := !held && len(g.held) < HeldMax
		if take {
			g.held[id] = struct{}{}
		}
		g.mu.Unlock()
		if take && g.enqueue(orderJob{id: id, close: close}) {
			taken++
		}
	}
	return taken
}

// enqueue queues a held job and reports true, or releases it when the
// queue is full.
func (g *Gate) enqueue(j orderJob) bool {
	select {
	case g.queue <- j:
		return true
	default:
		g.release(j.id)
		return false
	}
}

func (g *Gate) release(id int64) {
	g.mu.Lock()
	delete(g.held, id)
	g.mu.Unlock()
}

// Run checks the held orders, Concurrency at once, until ctx ends; it
// returns when its workers have stopped.
func (g *Gate) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range g.cfg.Concurrency {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-g.queue:
					g.checkOrder(ctx, j)
				}
			}
		})
	}
	wg.Wait()
}

// orderBody is what a check of an order POSTs: the order as the API's
// order object (as stored: status pending_payment, its deadline passed).
type orderBody struct {
	Order json.RawMessage `json:"order"`
}

// checkOrder asks about one order and acts on the answer.
func (g *Gate) checkOrder(ctx context.Context, j orderJob) {
	key := strconv.FormatInt(j.id, 10)
	if wait := g.checker.Wait(key); wait > 0 {
		// Extended by the last answer to a moment from then: asked
		// again once its step passed, not at every deadline it sets.
		g.clock.AfterFunc(wait, func() { g.enqueue(j) })
		return
	}
	o, err := g.cfg.Orders.Order(ctx, j.id)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("beforeclose: payment check: reading the order failed; the sweeper hands it over again", "order", j.id, "err", err)
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
	body, _ := json.Marshal(orderBody{Order: hourglass.MarshalOrder(o)}) // a RawMessage of valid JSON: cannot fail
	// No cap: the store refuses a deadline later than MaxOrderLifetime
	// after the order's creation (its first deadline is not stored, and
	// is at most that), a failed check (errAnswer).
	v := g.Check(ctx, Request{Key: key, URL: g.cfg.URL, Body: body, Policy: g.cfg.Policy, Subject: "order", Attrs: []any{"order", j.id},
		Apply: func(ctx context.Context, a Answer) error { return g.settle(ctx, j.id, a) }})
	switch {
	case v.Close:
		cause := hourglass.CauseCheckClose
		if v.Err != nil {
			cause = hourglass.CauseCheckFailed // on error: close
		}
		if err := j.close(ctx, []int64{j.id}, cause); err != nil {
			g.log.Warn("beforeclose: payment check: close failed; the sweeper hands the order over again", "order", j.id, "err", err)
		}
	case v.Err != nil && !v.Cancelled:
		// Pending meanwhile; held until checked again.
		g.clock.AfterFunc(v.RetryAt.Sub(g.clock.Now()), func() { g.enqueue(j) })
		return
	}
	g.release(j.id)
}

// errAnswer marks an answer the store refused (an extend to a deadline
// that is not allowed): a failed check.
var errAnswer = errors.New("the answer cannot be applied")

// settle marks order id paid or extends it as answer a says. An error is
// a failed check; a failure of the store is logged and left to the
// sweeper (nil).
func (g *Gate) settle(ctx context.Context, id int64, a Answer) error {
	switch a.Action {
	case ActionPaid:
		_, err := g.cfg.Orders.PayDueOrder(ctx, id, a.PaymentID)
		switch hourglass.ErrorCode(err) {
		case "":
			g.log.Info("beforeclose: payment check: the order was paid; marked paid instead of closed", "order", id, "payment_id", a.PaymentID)
		case hourglass.CodeOrderNotPayable, hourglass.CodeNotFound:
			g.log.Info("beforeclose: payment check answered paid; the order is no longer pending", "order", id, "err", err)
		default:
			g.log.Warn("beforeclose: payment check answered paid; marking it paid failed; the sweeper checks it again", "order", id, "err", err)
		}
	case ActionExtend:
		_, err := g.cfg.Orders.ExtendOrder(ctx, hourglass.ExtendOrderParams{ID: id, Deadline: a.Deadline, Overdue: true})
		switch hourglass.ErrorCode(err) {
		case "":
			g.log.Info("beforeclose: payment check: order extended", "order", id, "deadline", a.Deadline, "capped", a.Capped)
		case hourglass.CodeInvalidArgument:
			return fmt.Errorf("%w: extend to %s: %s", errAnswer, a.Deadline.Format(hourglass.TimeFormat), hourglass.ErrorMessage(err))
		case hourglass.CodeInvalidTransition, hourglass.CodeNotFound:
			g.log.Info("beforeclose: payment check answered extend; the order is no longer pending", "order", id, "err", err)
		default:
			g.log.Warn("beforeclose: payment check answered extend; extending failed; the sweeper checks it again", "order", id, "err", err)
		}
	}
	return nil
}
