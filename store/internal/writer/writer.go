// Package writer is the one group-commit writer of the stores: writes queue
// in lanes (store/internal/writequeue: closes and fires urgent, API writes
// normal, bookkeeping low), a few goroutines each take what waits as one
// batch and hand it to the store's dialect to run as one transaction. Around
// that one call it does everything the stores share:
//
//   - a write whose caller gave up before its batch began is skipped;
//   - a transaction rolled back by a race with another (a deadlock, a
//     serialization or certification failure) runs again, as the dialect's
//     named RetryPolicy allows, each retry counted with its reason;
//   - any other failure that may be one write's own (a statement the server
//     refused) is bisected (store/internal/bisect), so a broken write fails
//     only itself and costs its peers O(log n) transactions;
//   - a failure of the database itself (unreachable, out of space) or a
//     transaction whose outcome is unknown (its COMMIT sent, no answer) fails
//     the writes of that transaction with unavailable and never runs them
//     again: a create would happen twice. The client gets the one message
//     of store/internal/unavailable; the driver's text goes to the log;
//   - write health (store/writehealth) for /readyz, with its probe;
//   - the wake-up of the webhook delivery engine after a commit that
//     created deliveries;
//   - the due feed (hourglass.DueFeed, feed.go): a committed write that
//     says what it made due (Announcer) is announced to the subscribers
//     (the engine) before its caller has its answer.
//
// A dialect supplies only Run ("run these writes as one transaction") and
// Classify ("what does this error mean"), as temporal's persistence and
// river's batch completer keep their logic above a thin driver. The package
// imports the root package, the timing core (for the restart loop of the
// remote feed) and the store's internal packages only.
package writer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/bisect"
	"github.com/hourglass/hourglass/store/internal/unavailable"
	"github.com/hourglass/hourglass/store/internal/writequeue"
	"github.com/hourglass/hourglass/store/writehealth"
	"github.com/hourglass/hourglass/timing"
)

// Write is what the writer needs of a dialect's write (its *op): the write
// carries its own inputs and outputs, and its error.
type Write interface {
	// Fail answers the write with err, dropping any output a failed Run
	// left in it.
	Fail(err error)
	// Err is the write's answer once its batch is done: nil, a refusal
	// Run set, or what Fail set.
	Err() error
}

// Dialect is what a store gives the writer. Its methods are called from the
// writer goroutines, one batch at a time per goroutine.
type Dialect[T Write] interface {
	// Run runs writes as one transaction. It returns nil when the
	// transaction committed, each write's answer set (a refusal for a
	// domain reason, such as insufficient stock, is an answer: it fails only
	// its write), and how many webhook deliveries it created. An error
	// means it rolled back, or, wrapped with OutcomeUnknown, that it may
	// have committed; a write that fails alone gets the error as it is, so
	// it should name the store. Run may be called again with the same writes (a
	// retry, a half of a bisection): it must set every output afresh. ctx
	// ends at the policy's Timeout.
	Run(ctx context.Context, writes []T) (deliveries int, err error)
	// Classify says what an error of Run means.
	Classify(err error) Class
}

// Kind is what a failed transaction's error means to the writer.
type Kind int

const (
	// OneWrite: the failure may be one write's own (a statement the server
	// refused, a value it cannot store): the batch is bisected. So is a
	// Retry whose attempts are used up.
	OneWrite Kind = iota
	// Retry: the transaction was rolled back because it raced another (a
	// deadlock, a serialization or certification failure, a lock wait
	// timeout); running it again is safe.
	Retry
	// Unavailable: the database could not be reached or could not make the
	// write durable. The writes of the transaction fail with unavailable.
	Unavailable
)

// Class is a classified error: its Kind, and for a Retry the reason
// Config.ObserveRetry is told ("deadlock", "serialization", …).
type Class struct {
	Kind   Kind
	Reason string
}

// RetryPolicy is how a dialect runs again a transaction that lost a race.
// Each dialect names one and uses it for its batches and for its other
// transactions alike.
type RetryPolicy struct {
	// Attempts is the most times a transaction runs, the first included
	// (at least 1).
	Attempts int
	// Backoff, if set, is how long to wait before retry n (1, 2, …).
	Backoff func(n int) time.Duration
	// Timeout, when positive, bounds one batch, its retries included: a
	// database that stopped answering fails the batch as unavailable (its
	// outcome unknown) instead of blocking its callers for ever.
	Timeout time.Duration
}

// Do runs fn, again while classify names its error a Retry (telling
// observe, if set, the reason), at most p.Attempts times, waiting
// p.Backoff between attempts. The wait is in real time whatever clock the
// store decides on: it spaces attempts that race other transactions on a
// real database. Do returns fn's last error, at once if ctx ends during a
// wait.
func (p RetryPolicy) Do(ctx context.Context, fn func() error, classify func(error) Class, observe func(reason string)) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt >= p.Attempts {
			return err
		}
		c := classify(err)
		if c.Kind != Retry {
			return err
		}
		if observe != nil {
			observe(c.Reason)
		}
		if p.Backoff != nil {
			if timing.Sleep(ctx, hourglass.SystemClock{}, p.Backoff(attempt)) != nil {
				return err
			}
		}
	}
}

// outcomeUnknown wraps an error after which a transaction may or may not
// have committed.
type outcomeUnknown struct{ err error }

func (e outcomeUnknown) Error() string { return "outcome unknown: " + e.err.Error() }
func (e outcomeUnknown) Unwrap() error { return e.err }

// OutcomeUnknown marks err as leaving its transaction's outcome unknown (the
// COMMIT was sent and no answer came back): the writer fails its writes
// with unavailable and never runs them again, whatever Classify says.
func OutcomeUnknown(err error) error { return outcomeUnknown{err} }

// IsOutcomeUnknown reports whether err was marked by OutcomeUnknown.
func IsOutcomeUnknown(err error) bool { return errors.As(err, new(outcomeUnknown)) }

// Lane is where a write waits: see writequeue.
type Lane int

const (
	// Normal is the API writes' lane.
	Normal Lane = iota
	// Urgent writes (closes, timer fires: deadlines) are taken first, so a
	// burst of creates cannot make a deadline late.
	Urgent
	// Low writes (bookkeeping no request waits on) are taken only into the
	// room the others leave in a batch, so a backlog of them cannot slow
	// the API.
	Low
)

// Config configures New. Name, Log and Retry.Attempts are required.
type Config[T Write] struct {
	// Name prefixes log lines and errors ("postgres").
	Name string
	Log  *slog.Logger
	// Writers is the number of writer goroutines (at least 1).
	Writers int
	// MaxBatch is the most writes of one transaction.
	MaxBatch int
	// Weight and UrgentBudget, when set, bound the urgent writes of one
	// batch: they are taken while their weights add up to at most the
	// budget (writequeue.NewBudgeted).
	Weight       func(T) int
	UrgentBudget int
	Retry        RetryPolicy
	// Gather, when positive, lets a writer that just committed several
	// writes at once (clients are writing concurrently) wait for more
	// before it runs its next batch of API writes, as PostgreSQL's
	// commit_delay does when commit_siblings transactions are active: it
	// waits while writes keep coming, each within Gather/4 of the one
	// before, for at most Gather, until the batch holds as many writes as
	// the one before it and the writes that waited while it committed
	// (their clients, writing again) or is full. A
	// batch with an urgent write (a close, a fire) never waits, and an
	// urgent write ends a wait. Fewer, larger transactions cost the
	// database and the node less per write: a node among several, which
	// gets a share of the clients, otherwise commits small batches
	// (docs/benchmarks/several-nodes.md). 0: no wait.
	Gather time.Duration
	// Shared, when set, is asked before each Gather: the writer waits only
	// while it reports true, that other nodes share the database (the
	// store's cluster reads say so: store/internal/siblings). A node alone
	// gets every client's writes and its batches are as large as they make
	// them; a wait would only add to their latency. nil: always.
	Shared func() bool
	// LowGather, when positive, is Gather for a batch of Low writes only
	// (bookkeeping no request waits on: webhook attempt records, the
	// fan-out): after a batch of several, such a batch waits for more the
	// same way, up to LowGather, until it is full (whatever the batch
	// before held), and any other write ends the wait. In a
	// burst of webhook deliveries each attempt's record is a Low write:
	// without a wait SQLite committed about 4 of them per transaction (a
	// WAL append and an fsync each), and the writer was busy 80% of the
	// time (docs/benchmarks/webhooks.md). 0: no wait.
	LowGather time.Duration
	// Clock measures the commits for Observe (nil: the system clock).
	// Gather and LowGather wait in real time whatever it is.
	Clock hourglass.Clock
	// Scrub, if set, removes secrets (a URL's password) from a driver's
	// error before it is logged.
	Scrub func(string) string
	// Probe is a small write tried every ProbeInterval while writes fail,
	// so the write health clears by itself when the database is back.
	Probe         func(ctx context.Context) error
	ProbeInterval time.Duration
	// Observe, if set, is told each batch's size and how long it took.
	Observe func(writes int, commit time.Duration)
	// ObserveRetry, if set, is told the reason of each retry.
	ObserveRetry func(reason string)
	// BeforeTx, if set, is called before each transaction with the number
	// of writes it runs (tests count a failed batch's transactions).
	BeforeTx func(writes int)
}

// Writer is a store's group-commit writer. It is safe for concurrent use.
type Writer[T Write] struct {
	cfg        Config[T]
	dialect    Dialect[T]
	queue      *writequeue.Queue[*entry[T]]
	health     *writehealth.Tracker
	deliveries chan struct{}
	feed       feed // the due feed (feed.go)
	wg         sync.WaitGroup
	closeOnce  sync.Once

	gathering func() // tests: called when a gather begins to wait

	mu      sync.Mutex
	failing bool // the last batch failed with unavailable (for the log)
}

// gatherSiblings is the least size of a writer's previous batch for which
// it gathers (Config.Gather): below it, writes come one at a time, and a
// wait would only add to their latency.
const gatherSiblings = 2

// entry is a queued write.
type entry[T Write] struct {
	ctx  context.Context
	w    T
	done chan struct{}
	lane Lane // where it was queued
}

// New starts cfg.Writers writer goroutines running batches with d. Close
// must be called to stop them.
func New[T Write](cfg Config[T], d Dialect[T]) *Writer[T] {
	w := &Writer[T]{cfg: cfg, dialect: d, deliveries: make(chan struct{}, 1)}
	if cfg.Clock == nil {
		w.cfg.Clock = hourglass.SystemClock{}
	}
	if cfg.Weight != nil {
		w.queue = writequeue.NewBudgeted(func(e *entry[T]) int { return cfg.Weight(e.w) }, cfg.UrgentBudget)
	} else {
		w.queue = writequeue.New[*entry[T]]()
	}
	probe := cfg.Probe
	if probe == nil {
		probe = func(context.Context) error { return nil }
	}
	w.health = writehealth.Start(cfg.ProbeInterval, probe)
	for range max(cfg.Writers, 1) {
		w.wg.Add(1)
		go w.loop()
	}
	return w
}

// Close stops the writers after the queued writes; writes submitted after
// it fail with unavailable. It is idempotent.
func (w *Writer[T]) Close() {
	w.closeOnce.Do(func() {
		w.queue.Close()
		w.wg.Wait()
		w.health.Stop()
	})
}

// errClosed is the answer of a write submitted after Close.
var errClosed = &hourglass.Error{Code: hourglass.CodeUnavailable, Message: "store is closed"}

// Submit queues write in lane and waits until its transaction committed or
// failed; it returns write.Err(). A committed write that is an Announcer is
// announced to the due feed before Submit returns. Once queued, a write runs even if ctx ends
// while it waits, unless ctx ended before its batch began: then it is
// skipped and fails with ctx.Err().
func (w *Writer[T]) Submit(ctx context.Context, lane Lane, write T) error {
	// SubmitAll's path for one write, without its slices: most API calls
	// submit one.
	if err := ctx.Err(); err != nil {
		return err
	}
	e := &entry[T]{ctx: ctx, w: write, done: make(chan struct{}), lane: lane}
	if !w.push([]*entry[T]{e}, lane) {
		return errClosed
	}
	<-e.done
	w.announce(write)
	return write.Err()
}

// SubmitAll is Submit for writes queued together: a writer that takes any
// of them takes as many as its batch has room for. It returns their errors.
func (w *Writer[T]) SubmitAll(ctx context.Context, lane Lane, writes []T) []error {
	errs := make([]error, len(writes))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	es := make([]*entry[T], len(writes))
	for i, wr := range writes {
		es[i] = &entry[T]{ctx: ctx, w: wr, done: make(chan struct{}), lane: lane}
	}
	if !w.push(es, lane) {
		for i := range errs {
			errs[i] = errClosed
		}
		return errs
	}
	for i, e := range es {
		<-e.done
		errs[i] = e.w.Err()
	}
	w.announce(writes...)
	return errs
}

// push queues es in lane, together (Urgent, Normal) or each behind the
// others (Low). It returns false once the queue is closed.
func (w *Writer[T]) push(es []*entry[T], lane Lane) bool {
	if lane != Low {
		return w.queue.PushAll(es, lane == Urgent)
	}
	for _, e := range es {
		if !w.queue.PushLow(e) {
			return false
		}
	}
	return true
}

// Commit runs writes as one batch on the caller's goroutine, as a writer
// runs what it takes (tests use it for a batch larger than MaxBatch).
func (w *Writer[T]) Commit(ctx context.Context, writes []T) {
	es := make([]*entry[T], len(writes))
	for i, wr := range writes {
		es[i] = &entry[T]{ctx: ctx, w: wr, done: make(chan struct{})}
	}
	w.commit(es)
	w.announce(writes...)
}

// Len returns how many writes wait; Urgent, how many closes (fanout.Queue).
func (w *Writer[T]) Len() int    { return w.queue.Len() }
func (w *Writer[T]) Urgent() int { return w.queue.Urgent() }

// Health returns nil while writes commit, or, from a write that failed with
// unavailable until one commits again, an unavailable *hourglass.Error
// saying so (for /readyz).
func (w *Writer[T]) Health() error { return w.health.Err() }

// DeliveriesCreated fires after commits that created webhook deliveries
// (and after NotifyDeliveries). It has one consumer.
func (w *Writer[T]) DeliveriesCreated() <-chan struct{} { return w.deliveries }

// NotifyDeliveries wakes DeliveriesCreated's consumer; wake-ups coalesce.
func (w *Writer[T]) NotifyDeliveries() {
	select {
	case w.deliveries <- struct{}{}:
	default:
	}
}

func (w *Writer[T]) loop() {
	defer w.wg.Done()
	batch := make([]*entry[T], 0, w.cfg.MaxBatch)
	// last is the previous batch's size, waited the API writes that came
	// while it committed: the writes a closed loop's clients send next
	// (closes end a gather, and bookkeeping is nobody's client).
	last, waited := 0, 0
	for {
		batch = w.queue.Take(batch[:0], w.cfg.MaxBatch)
		if len(batch) == 0 {
			return // closed and drained
		}
		if last >= gatherSiblings {
			batch = w.gather(batch, last+waited)
		}
		last = len(batch)
		w.commit(batch)
		waited = w.queue.Normal()
	}
}

// gather returns batch with the writes that came while it waited for them
// (Config.Gather while Config.Shared says so, or LowGather for a batch of
// Low writes only): while each came within a quarter of that of the one
// before, for at most that, until the batch is full or holds a write that
// ends the wait (an urgent one; in a Low batch, any other); for Gather,
// also until it holds back writes: the batch before it and the writes that
// waited while it committed (their clients, writing again: the whole of a
// closed loop, which otherwise splits into two groups that commit in turn,
// each waiting for as many as the one before). In an open loop, where the
// writes of a batch do not come back, the quarter ends a wait once they
// thin out, and the wait its bound once they do not.
func (w *Writer[T]) gather(batch []*entry[T], back int) []*entry[T] {
	d, ends, enough := w.cfg.Gather, anyUrgent[T], min(back, w.cfg.MaxBatch)
	if d > 0 && w.cfg.Shared != nil && !w.cfg.Shared() {
		d = 0
	}
	if w.cfg.LowGather > 0 && (d <= 0 || w.cfg.LowGather < d) && allLow(batch) {
		d, ends, enough = w.cfg.LowGather, anyNotLow[T], w.cfg.MaxBatch
	}
	if d <= 0 || ends(batch) || len(batch) >= enough {
		return batch
	}
	if w.gathering != nil {
		w.gathering()
	}
	// Real time, whatever cfg.Clock is: the wait paces writes to a real
	// database (as RetryPolicy.Do's backoff), and a store opened on a fake
	// clock must not hang on it.
	clock := hourglass.SystemClock{}
	end := clock.Now().Add(d)
	for len(batch) < enough {
		left := end.Sub(clock.Now())
		if left <= 0 {
			return batch
		}
		wait := clock.NewTimer(min(d/4, left))
		came := w.queue.Wait(wait.C())
		wait.Stop()
		if !came {
			return batch
		}
		// Take returns at once: batch is not empty. It may find nothing new
		// (the wake-up was of a write taken already): wait on.
		n := len(batch)
		batch = w.queue.Take(batch, w.cfg.MaxBatch-n)
		if ends(batch[n:]) {
			return batch // a close to run now, or a write that does not wait for Low ones
		}
	}
	return batch
}

// allLow reports whether every entry is a Low write.
func allLow[T Write](entries []*entry[T]) bool { return !anyNotLow(entries) }

// anyNotLow reports whether entries hold a write that is not Low.
func anyNotLow[T Write](entries []*entry[T]) bool {
	for _, e := range entries {
		if e.lane != Low {
			return true
		}
	}
	return false
}

// anyUrgent reports whether entries hold an urgent write.
func anyUrgent[T Write](entries []*entry[T]) bool {
	for _, e := range entries {
		if e.lane == Urgent {
			return true
		}
	}
	return false
}

// commit runs a batch and answers each of its writes.
func (w *Writer[T]) commit(batch []*entry[T]) {
	start := w.cfg.Clock.Now()
	live := make([]T, 0, len(batch))
	for _, e := range batch {
		if err := e.ctx.Err(); err != nil {
			e.w.Fail(err)
			continue
		}
		live = append(live, e.w)
	}
	fanned, failed := 0, 0
	var first error // the answer of the first range that failed
	err, commits := bisect.Run(len(live), func(lo, hi int) error {
		n, err := w.runRetrying(live[lo:hi])
		fanned += n
		return err
	}, func(err error) bool { return w.kind(err) != Unavailable }, func(lo, hi int, err error) {
		failed += hi - lo
		answer := w.answer(err)
		if first == nil {
			first = answer
		}
		for _, wr := range live[lo:hi] {
			wr.Fail(answer)
		}
	})
	if err != nil && commits > 1 {
		w.cfg.Log.Warn(w.cfg.Name+": group commit failed; bisected it", "writes", len(live), "failed", failed, "transactions", commits, "err", w.scrub(err))
	}
	if len(live) > 0 {
		w.noteHealth(err, first)
	}
	if w.cfg.Observe != nil {
		w.cfg.Observe(len(batch), w.cfg.Clock.Now().Sub(start))
	}
	if fanned > 0 {
		w.NotifyDeliveries()
	}
	for _, e := range batch {
		close(e.done)
	}
}

// runRetrying runs writes as one transaction, again after a race, as the
// retry policy allows.
func (w *Writer[T]) runRetrying(writes []T) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	if w.cfg.Retry.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, w.cfg.Retry.Timeout)
	}
	defer cancel()
	var fanned int
	err := w.cfg.Retry.Do(ctx, func() error {
		if w.cfg.BeforeTx != nil {
			w.cfg.BeforeTx(len(writes))
		}
		var err error
		fanned, err = w.dialect.Run(ctx, writes)
		if err != nil && ctx.Err() != nil {
			err = OutcomeUnknown(err) // the database stopped answering
		}
		return err
	}, w.classify, w.cfg.ObserveRetry)
	if err != nil {
		return 0, err
	}
	return fanned, nil
}

func (w *Writer[T]) classify(err error) Class {
	if IsOutcomeUnknown(err) {
		return Class{Kind: Unavailable}
	}
	return w.dialect.Classify(err)
}

func (w *Writer[T]) kind(err error) Kind { return w.classify(err).Kind }

// answer is the error the writes of a failed transaction return: an
// unavailable error of the dialect's own (a *hourglass.Error naming a
// storage cause, without driver text) as it is; any other unavailable with
// the one message of every store, the driver's error logged; anything else
// (one write's failure, named by Run) as it is.
func (w *Writer[T]) answer(err error) error {
	if w.kind(err) != Unavailable {
		return err
	}
	var he *hourglass.Error
	if errors.As(err, &he) && he.Code == hourglass.CodeUnavailable {
		return err
	}
	cause := errors.New(w.scrub(err))
	w.cfg.Log.Warn(w.cfg.Name+": database unavailable", "op", "write orders", "err", cause)
	return unavailable.New(w.cfg.Name+": write orders", cause)
}

func (w *Writer[T]) scrub(err error) string {
	if w.cfg.Scrub == nil {
		return err.Error()
	}
	return w.cfg.Scrub(err.Error())
}

// noteHealth records a batch's outcome (err: its first transaction's,
// answered with answer) in the write health, logging when writes start
// failing and when they commit again.
func (w *Writer[T]) noteHealth(err, answer error) {
	if err == nil {
		w.health.Record(nil)
	} else if w.kind(err) == Unavailable {
		w.health.Record(answer) // an unavailable range is not split: answer is err's
	} else {
		return // one write's failure says nothing of the database
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil && !w.failing:
		w.failing = true
		w.cfg.Log.Error(w.cfg.Name+": writes are failing; /readyz answers 503 until one commits", "err", w.scrub(err))
	case err == nil && w.failing:
		w.failing = false
		w.cfg.Log.Info(w.cfg.Name + ": writes commit again")
	}
}
