// Package source closes the rows of shops' own tables at their deadlines
// (--sources; hourglass.Source): for each source it keeps the rows due
// within the window in an in-memory timing wheel, loaded from the shop's
// table through the shop's index (package timing's window loader), finds
// new rows by tailing the key, sweeps what is overdue, and at each
// deadline runs the source's close statements (hourglass.SourceTable.
// Close): the guard, then the rest and the source.closed event, in one
// transaction. Rows are partitioned by key among the nodes like orders.
//
// Exactly once rests on the guard, not on timing: it is a conditional
// update of one row (… AND status = 'UNPAID'), so a second close of the
// row, from a retry, a sweep or another node, changes nothing. On time
// rests on the wheel: a row is closed at its deadline by hourglass's
// clock, which on a shared database follows the database's.
package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/timing"
	"github.com/hourglass/hourglass/timing/dispatch"
	"github.com/hourglass/hourglass/timing/timerloop"
	"github.com/hourglass/hourglass/timing/window"
)

// Defaults of Config.
const (
	TailIntervalDefault  = 250 * time.Millisecond
	SweepIntervalDefault = 5 * time.Second
	SweepGraceDefault    = 2 * time.Second
	// GapWait is how long the tail reads again the keys below the
	// largest it saw: a row whose key was drawn earlier but committed
	// later (concurrent inserts) is found within it; one later still is
	// found by the next window load.
	GapWait = 5 * time.Second
	// pageSize is the most rows per tail or sweep query.
	pageSize = 1000
	// backlogGrace: while the close path progressed within it, the
	// sweeper leaves it what it holds (the engine's BacklogGrace).
	backlogGrace = 30 * time.Second
	// maxHeld bounds the rows a source holds in memory (about 50 MB): a
	// backlog beyond it is paged in as it drains.
	maxHeld = 500_000
	// retryMax caps the wait before closing a row again after a failed
	// statement or a guard that matched nothing while the row is due.
	retryMax = 5 * time.Second
)

// Observer is told what the sources do (metrics). Methods must not block.
type Observer interface {
	SourceClosed(source string, lateness time.Duration)
	SourceNoop(source string)
	SourceGuardError(source string)
	SourceFailed(source string)
	SourceRecovered(source string, n int)
	SourceHeld(source string, n int)
	// SourceBadRows counts n rows found with a bad key or deadline, by
	// reason (hourglass.BadSourceReasons; n 0 at start).
	SourceBadRows(source, reason string, n int)
	// SourceLockWaits counts n closes of a row that met a lock the shop
	// held (SourceBlocked); n is 0 once at start, so that the count is
	// there before the first.
	SourceLockWaits(source string, n int)
	// SourceReminders counts n reminders settled, by outcome: "sent" (a
	// source.expiring written) or "skipped" (never to be sent: the row was
	// no longer pending, or its deadline had passed too); n is 0 for each
	// at start when the source has reminders.
	SourceReminders(source, outcome string, n int)
}

// Checker asks a payment provider before a close (package beforeclose
// implements it; nil: close without asking).
type Checker interface {
	// Check asks whether the row may be closed now: close with the
	// cause the close records (hourglass.CauseCheckClose: answered close;
	// CauseCheckFailed: failed too often with on error: close), or not yet
	// ("") with when to look at it again.
	Check(ctx context.Context, src hourglass.Source, row hourglass.DueItem) (close hourglass.CloseCause, retryAt time.Time)
}

// Config configures a Runner. Zero values mean the defaults.
type Config struct {
	Store   hourglass.SourceStore
	Sources []hourglass.Source
	// Window and LoadInterval are the window loader's (the engine's
	// --window and --load-interval).
	Window, LoadInterval time.Duration
	// TailInterval is how often new rows are looked for
	// (--source-tail-interval).
	TailInterval time.Duration
	// SweepInterval and SweepGrace: every SweepInterval, rows overdue by
	// more than SweepGrace are closed (the engine's sweeper's settings).
	SweepInterval, SweepGrace time.Duration
	// Ownership divides the rows among the nodes (nil: every row).
	Ownership cluster.Ownership
	// BlockedAlert is how long a row may stay locked by the shop's
	// transactions, its closes retried, before an ERROR and the
	// source_row_blocked alert (--source-blocked-alert).
	BlockedAlert time.Duration
	// Node is this node's id, recorded with each close beside its cause
	// (hourglass.Closer).
	Node     string
	Checker  Checker
	Observer Observer
	Clock    hourglass.Clock
	Logger   *slog.Logger
}

// Runner runs every source of a node.
type Runner struct {
	cfg  Config
	srcs []*runner
	// ready is closed once every source has read its largest key and
	// loaded its first window (Ready).
	ready     chan struct{}
	readyOnce sync.Once
}

// New opens every source (refusing a bad one with one line that says
// what is wrong) and logs a warning for each query that would read a whole
// table. ctx bounds the checks.
func New(ctx context.Context, cfg Config) (*Runner, []string, error) {
	if err := hourglass.ValidateSources(cfg.Sources); err != nil {
		return nil, nil, err
	}
	if len(cfg.Sources) > 0 && cfg.Store == nil {
		return nil, nil, errors.New("sources need PostgreSQL or MySQL: the shop's tables live in hourglass's database, and SQLite cannot be shared with an order service")
	}
	cfg.Window = cmp.Or(cfg.Window, window.WindowDefault)
	cfg.LoadInterval = cmp.Or(cfg.LoadInterval, window.LoadIntervalDefault)
	cfg.TailInterval = cmp.Or(cfg.TailInterval, TailIntervalDefault)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, SweepIntervalDefault)
	cfg.SweepGrace = cmp.Or(cfg.SweepGrace, SweepGraceDefault)
	cfg.BlockedAlert = cmp.Or(cfg.BlockedAlert, BlockedAlertDefault)
	cfg.Clock = cmp.Or[hourglass.Clock](cfg.Clock, hourglass.SystemClock{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.TailInterval < 10*time.Millisecond || cfg.TailInterval > time.Minute {
		return nil, nil, fmt.Errorf("--source-tail-interval must be between 10ms and 1m, got %s", cfg.TailInterval)
	}
	if cfg.BlockedAlert < time.Second || cfg.BlockedAlert > 24*time.Hour {
		return nil, nil, fmt.Errorf("--source-blocked-alert must be between 1s and 24h, got %s", cfg.BlockedAlert)
	}
	r := &Runner{cfg: cfg, ready: make(chan struct{})}
	var warnings []string
	for _, src := range cfg.Sources {
		t, w, err := cfg.Store.OpenSource(ctx, src)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
		r.srcs = append(r.srcs, newRunner(cfg, src, t))
	}
	return r, warnings, nil
}

// Run runs every source until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range r.srcs {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	go func() {
		for _, s := range r.srcs {
			select {
			case <-s.started:
			case <-ctx.Done():
				return
			}
		}
		r.readyOnce.Do(func() { close(r.ready) })
	}()
	wg.Wait()
}

// Ready is closed once every source has read its largest key (rows
// inserted from then on are tailed) and loaded its first window (rows
// inserted before are held): from then on no row is left to the sweeper.
func (r *Runner) Ready() <-chan struct{} { return r.ready }

// Misconfigured returns the sources whose guard changed more than one row
// within the last 10 minutes, for the source_misconfigured alert.
func (r *Runner) Misconfigured(now time.Time) []string {
	var out []string
	for _, s := range r.srcs {
		if at := s.guardErrorAt.Load(); at != 0 && now.Sub(hourglass.FromUnixMilli(at)) < 10*time.Minute {
			out = append(out, s.src.Name)
		}
	}
	return out
}

// Checks reports whether some source asks a payment provider first.
func (r *Runner) Checks() bool { return r.cfg.Checker != nil && AsksBeforeClose(r.cfg.Sources) }

// FailingSince returns when the sources' payment checks began failing
// without a break (ok false: they answer, or none asks), for the
// before_close_failures alert.
func (r *Runner) FailingSince() (time.Time, bool) {
	if f, ok := r.cfg.Checker.(interface{ FailingSince() (time.Time, bool) }); ok && r.Checks() {
		return f.FailingSince()
	}
	return time.Time{}, false
}

// Held returns how many rows each source holds in its window, by name.
func (r *Runner) Held() map[string]int {
	out := make(map[string]int, len(r.srcs))
	for _, s := range r.srcs {
		out[s.src.Name] = s.sched.Pending() + s.sched.Queued()
	}
	return out
}

// runner is one source.
type runner struct {
	cfg   Config
	src   hourglass.Source
	table hourglass.SourceTable
	clock hourglass.TimerClock
	log   *slog.Logger
	parts *cluster.Tracker
	sched *timerloop.Scheduler
	load  *window.Loader

	// guardErrorAt is when the guard last changed more than one row
	// (unix ms; 0: never).
	guardErrorAt atomic.Int64
	// started is closed after the largest key was read and the first
	// window loaded.
	started     chan struct{}
	startedOnce sync.Once
	keyRead     atomic.Bool
	loaded      atomic.Bool
	// extended holds the rows a payment check extended or is retrying.
	extended extensions
	stats    stats
	bad      badRows
	// blocked holds the rows whose last close met the shop's lock;
	// closeAlone closes them, aloneSem bounding how many at once.
	blocked blockedRows
	// causes tells what each close records as its cause; causesP holds
	// it for the ownership callback, which may run before newRunner
	// returns.
	causes   *causes
	causesP  atomic.Pointer[causes]
	aloneSem chan struct{}
	aloneWG  sync.WaitGroup
	// rem times the rows' reminders (nil without RemindBefore).
	rem *reminders
}

func newRunner(cfg Config, src hourglass.Source, t hourglass.SourceTable) *runner {
	s := &runner{cfg: cfg, src: src, table: t, clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger.With("source", src.Name), started: make(chan struct{}),
		aloneSem: make(chan struct{}, aloneConcurrency)}
	s.sched = timerloop.NewWheel(timerloop.Config{Name: "source " + src.Name, Clock: cfg.Clock, Logger: s.log,
		Dispatch: dispatch.Config{Workers: 2, Batch: 500, RetryMax: retryMax, Logger: s.log, Clock: cfg.Clock}})
	started := s.clock.Now()
	s.parts = cluster.Track(cfg.Ownership, func() {
		if c := s.loadCauses(); c != nil {
			c.own(cfg.Ownership.Owned(), s.clock.Now())
		}
		if s.load != nil {
			s.load.Wake()
		}
	})
	s.causesP.Store(newCauses(started, s.parts.Owned()))
	s.causes = s.loadCauses()
	s.load = window.New(window.Config{
		Name:         "source " + src.Name,
		Sources:      []window.Source{t.Due},
		Sink:         s.schedule,
		Window:       cfg.Window,
		LoadInterval: cfg.LoadInterval,
		MaxHeld:      maxHeld,
		Held:         func() int { return s.sched.Pending() + s.sched.Queued() },
		OnFirstLoad:  func() { s.loaded.Store(true); s.maybeStarted() },
		Parts:        s.parts,
		Clock:        cfg.Clock,
		Logger:       s.log,
	})
	if src.RemindBefore > 0 {
		s.rem = newReminders(s)
	}
	for _, reason := range hourglass.BadSourceReasons() {
		cfg.Observer.SourceBadRows(src.Name, reason, 0) // in /metrics from the start
	}
	cfg.Observer.SourceLockWaits(src.Name, 0)
	return s
}

func (s *runner) loadCauses() *causes { return s.causesP.Load() }

// maybeStarted closes started once the largest key was read, the first
// window loaded and the reminders' first page (if any) scheduled.
func (s *runner) maybeStarted() {
	if s.keyRead.Load() && s.loaded.Load() && (s.rem == nil || s.rem.paged.Load()) {
		s.startedOnce.Do(func() { close(s.started) })
	}
}

// schedule hands rows to the wheel, each at its deadline rounded up to
// the millisecond (a deadline of finer precision is never closed early).
func (s *runner) schedule(ctx context.Context, rows []hourglass.DueItem) error {
	for i, r := range rows {
		rows[i].At = hourglass.CeilMilli(r.At)
	}
	return s.sched.Schedule(ctx, rows)
}

func (s *runner) run(ctx context.Context) {
	// The largest key is read before the first load: a row committed
	// before it is loaded, one after it tailed.
	var last int64
	boot := timing.Supervisor{Clock: s.clock, Backoff: timing.Backoff{Min: 100 * time.Millisecond, Max: retryMax},
		Failed: func(err error, in time.Duration) {
			s.log.Warn("source: read the largest key failed; retrying", "err", err, "retry_in", in)
		}}
	if boot.Run(ctx, func(ctx context.Context) (err error) { last, err = s.table.MaxKey(ctx); return err }) != nil {
		return
	}
	s.keyRead.Store(true)
	s.maybeStarted()
	var wg sync.WaitGroup
	parts := []func(context.Context){
		func(ctx context.Context) {
			if s.rem != nil {
				s.rem.waitLoaded(ctx)
			}
			_ = s.sched.Run(ctx, s.deliver)
		},
		s.load.Run,
		func(ctx context.Context) { s.tail(ctx, last) },
		s.sweep,
		s.report,
		s.watchBad,
	}
	if s.rem != nil {
		parts = append(parts, s.rem.run)
	}
	for _, f := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	wg.Wait()
	s.aloneWG.Wait()
}

// deliver closes the rows the wheel fired: those of partitions this node
// still owns, each after the payment check if the source has one.
func (s *runner) deliver(ctx context.Context, due []hourglass.DueItem) error {
	defer s.load.Released() // the loader pages in more once half has drained
	now := s.clock.Now()
	rows := make([]hourglass.DueItem, 0, len(due))
	var later []hourglass.DueItem
	for _, r := range due {
		if !s.parts.Has(r.ID) {
			continue // its partition moved: its new owner loads it
		}
		if u := s.extended.until(r.ID, now); !u.IsZero() {
			later = append(later, hourglass.DueItem{ID: r.ID, At: u})
			continue
		}
		rows = append(rows, r)
	}
	if s.cfg.Checker != nil && s.src.BeforeClose != "" {
		rows, later = s.check(ctx, rows, later)
	}
	if len(later) > 0 {
		_ = s.schedule(ctx, later)
	}
	// A row whose last close met the shop's lock is closed alone, after
	// the batch: if it is still locked, it costs no other row a wait.
	var alone []hourglass.DueItem
	rows = slices.DeleteFunc(rows, func(r hourglass.DueItem) bool {
		if s.blocked.has(r.ID) {
			alone = append(alone, r)
			return true
		}
		return false
	})
	if len(rows) > 0 {
		order, groups := s.causes.byCause(rows)
		for _, cause := range order {
			res, err := s.close(ctx, cause, groups[cause])
			if err != nil {
				if len(alone) > 0 {
					_ = s.schedule(ctx, alone)
				}
				return err // the dispatcher retries the batch (a close already committed changes nothing)
			}
			s.handle(ctx, res)
		}
	}
	s.closeAlone(ctx, alone)
	return nil
}

// close closes rows in one transaction, recording cause and this node
// with each close (hourglass.Closer).
func (s *runner) close(ctx context.Context, cause hourglass.CloseCause, rows []hourglass.DueItem) ([]hourglass.SourceResult, error) {
	return s.table.Close(hourglass.WithCloser(ctx, hourglass.Closer{Cause: cause, Node: s.cfg.Node}), rows)
}

// closeAlone closes each of rows in a transaction of its own, in the
// background (the dispatcher goes on with the next batch), at most
// aloneConcurrency at a time for the source. One whose transaction fails
// is tried again with backoff (later).
func (s *runner) closeAlone(ctx context.Context, rows []hourglass.DueItem) {
	for _, r := range rows {
		s.aloneWG.Add(1)
		go func() {
			defer s.aloneWG.Done()
			select {
			case s.aloneSem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-s.aloneSem }()
			res, err := s.close(ctx, s.causes.of(r), []hourglass.DueItem{r})
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("source: closing a row alone failed; retrying", "key", r.ID, "err", err)
					_ = s.schedule(ctx, []hourglass.DueItem{{ID: r.ID, At: later(r.At, s.clock.Now())}})
				}
				return
			}
			s.handle(ctx, res)
		}()
	}
}

// aloneConcurrency bounds the rows of a source closed alone at once
// (each holds a connection while it may wait for a lock).
const aloneConcurrency = 4

// check asks the payment provider about each row, beforeclose.ConcurrencyDefault at a
// time, and returns those to close now and those to look at again later.
func (s *runner) check(ctx context.Context, rows, later []hourglass.DueItem) (closeNow, again []hourglass.DueItem) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, beforeclose.ConcurrencyDefault)
	)
	again = later
	for _, r := range rows {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			first := s.extended.first(r.ID, r.At) // asked with the row's own deadline
			cause, retryAt := s.cfg.Checker.Check(ctx, s.src, hourglass.DueItem{ID: r.ID, At: first})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case cause != "":
				s.extended.forget(r.ID)
				s.causes.mark(r.ID, cause)
				closeNow = append(closeNow, r)
			case !retryAt.IsZero():
				if retryAt.After(r.At) {
					s.extended.set(r.ID, first, retryAt, s.clock.Now())
				}
				again = append(again, hourglass.DueItem{ID: r.ID, At: retryAt})
			}
		}()
	}
	wg.Wait()
	return closeNow, again
}

// handle counts each outcome and arms again the rows that stay pending.
func (s *runner) handle(ctx context.Context, res []hourglass.SourceResult) {
	now := s.clock.Now()
	var again []hourglass.DueItem
	for _, r := range res {
		if r.Outcome != hourglass.SourceBlocked {
			if d, reported := s.blocked.done(r.Key, now); reported {
				s.log.Info("source: a row the shop's transactions kept locked is no longer blocked", "key", r.Key, "blocked_for", d.Round(time.Millisecond))
			}
		}
		if r.Outcome == hourglass.SourceClosed || r.Outcome == hourglass.SourceNoop {
			s.causes.done(r.Key)
		}
		switch r.Outcome {
		case hourglass.SourceClosed:
			s.cfg.Observer.SourceClosed(s.src.Name, r.ClosedAt.Sub(r.Deadline))
			s.stats.closed(max(r.ClosedAt.Sub(r.Deadline), 0))
		case hourglass.SourceNoop:
			s.cfg.Observer.SourceNoop(s.src.Name)
			s.stats.noops.Add(1)
			if r.Pending {
				// Extended by the shop, or not yet due by the database's
				// clock: look again at its deadline, or soon.
				again = append(again, hourglass.DueItem{ID: r.Key, At: later(r.Deadline, now)})
				if s.rem != nil {
					s.rem.moved(ctx, r.Key, r.Deadline, now)
				}
			}
		case hourglass.SourceGuardError:
			s.cfg.Observer.SourceGuardError(s.src.Name)
			s.stats.guardErrors.Add(1)
			s.guardErrorAt.Store(hourglass.UnixMilli(now))
			s.log.Error("source: the guard (close[0]) changed more than one row; rolled back, nothing changed: fix the guard to match one row by its key",
				"key", r.Key, "rows", r.Affected)
		case hourglass.SourceFailed:
			s.cfg.Observer.SourceFailed(s.src.Name)
			s.stats.closeErrors.Add(1)
			s.log.Warn("source: a close statement failed; rolled back, will retry", "key", r.Key, "err", r.Err)
			again = append(again, hourglass.DueItem{ID: r.Key, At: later(r.Deadline, now)})
		case hourglass.SourceBlocked:
			s.cfg.Observer.SourceLockWaits(s.src.Name, 1)
			since, retryAt, overdue := s.blocked.wait(r.Key, now, s.cfg.BlockedAlert)
			if overdue {
				s.log.Error("source: a row stays locked by another transaction (the shop's); its close keeps being retried: look for a long transaction holding it or the rows its statements change",
					"key", r.Key, "blocked_for", now.Sub(since).Round(time.Millisecond), "err", r.Err)
			} else {
				s.log.Debug("source: a row was locked by another transaction; the rest of its batch closed, retrying it alone",
					"key", r.Key, "blocked_for", now.Sub(since).Round(time.Millisecond), "retry_at", retryAt, "err", r.Err)
			}
			again = append(again, hourglass.DueItem{ID: r.Key, At: retryAt})
		}
	}
	if len(again) > 0 {
		_ = s.schedule(ctx, again)
	}
}

// later is when to look at a pending row again: at its deadline if that
// is ahead, else after a wait that grows with how late it is (10 ms just
// past the deadline, the database's clock a little behind; up to 5 s for
// a row that stays pending long after).
func later(deadline, now time.Time) time.Time {
	if deadline.After(now) {
		return deadline
	}
	return now.Add(min(max(now.Sub(deadline)/4, 10*time.Millisecond), retryMax))
}

// tail finds new rows by key, every TailInterval: the pending rows above
// the largest key seen, then those in the holes the tail left below it.
// Keys are drawn before commit, so concurrent inserts commit out of key
// order: a key skipped (a hole) may be a row not yet committed. Holes are
// read again each time for GapWait (a row committed later still is found
// by the next window load, or the sweeper), at most maxHoles ranges of
// them (older ones merged). Rows are offered to the loader, which takes
// those due within its horizon.
func (s *runner) tail(ctx context.Context, last int64) {
	var holes holeSet
	for {
		if timing.Sleep(ctx, s.clock, s.cfg.TailInterval) != nil {
			return
		}
		now := s.clock.Now()
		for {
			rows, err := s.table.Tail(ctx, last, pageSize)
			if err != nil {
				s.log.Warn("source: tail new rows failed; retrying", "err", err)
				break
			}
			for _, r := range rows {
				if r.ID > last+1 {
					holes.add(last+1, r.ID-1, now)
				}
				last = r.ID
			}
			if err := s.offer(ctx, rows); err != nil || len(rows) < pageSize {
				break
			}
		}
		holes.expire(now.Add(-GapWait))
		if holes.empty() {
			continue
		}
		rows, err := s.table.Holes(ctx, holes.ranges(), pageSize)
		if err != nil {
			s.log.Warn("source: read rows committed late failed; retrying", "err", err)
			continue
		}
		for _, r := range rows {
			holes.fill(r.ID)
		}
		_ = s.offer(ctx, rows)
	}
}

// offer hands the rows of this node's partitions to the loader.
func (s *runner) offer(ctx context.Context, rows []hourglass.DueItem) error {
	mine := make([]hourglass.DueItem, 0, len(rows))
	for _, r := range rows {
		if s.parts.Has(r.ID) {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	if s.rem != nil {
		s.rem.offer(ctx, mine)
	}
	_, err := s.load.Offer(ctx, mine)
	return err
}

// maxHoles bounds the key ranges the tail reads again.
const maxHoles = 64

// hole is a range of keys the tail skipped, and when.
type hole struct {
	lo, hi int64
	seen   time.Time
}

// holeSet is the tail's holes, in key order. Not safe for concurrent use.
type holeSet struct{ hs []hole }

func (h *holeSet) empty() bool { return len(h.hs) == 0 }

// add records [lo, hi]; past maxHoles the two oldest merge (the keys
// between them are read again too: bounded by the insert rate).
func (h *holeSet) add(lo, hi int64, now time.Time) {
	h.hs = append(h.hs, hole{lo, hi, now})
	if len(h.hs) > maxHoles {
		h.hs[1].lo = h.hs[0].lo
		h.hs = h.hs[1:]
	}
}

// expire drops holes seen before cutoff.
func (h *holeSet) expire(cutoff time.Time) {
	i := 0
	for i < len(h.hs) && h.hs[i].seen.Before(cutoff) {
		i++
	}
	h.hs = h.hs[i:]
}

// fill removes key, found, from its hole.
func (h *holeSet) fill(key int64) {
	for i, x := range h.hs {
		if key < x.lo || key > x.hi {
			continue
		}
		var parts []hole
		if key > x.lo {
			parts = append(parts, hole{x.lo, key - 1, x.seen})
		}
		if key < x.hi {
			parts = append(parts, hole{key + 1, x.hi, x.seen})
		}
		h.hs = append(h.hs[:i], append(parts, h.hs[i+1:]...)...)
		return
	}
}

func (h *holeSet) ranges() [][2]int64 {
	out := make([][2]int64, len(h.hs))
	for i, x := range h.hs {
		out[i] = [2]int64{x.lo, x.hi}
	}
	return out
}

// sweep closes the rows overdue by more than SweepGrace, which the window
// did not close (a load that failed, a row committed long after its key
// was drawn, a partition taken over): counted as recovered.
func (s *runner) sweep(ctx context.Context) {
	for {
		if timing.Sleep(ctx, s.clock, s.cfg.SweepInterval) != nil {
			return
		}
		now := s.clock.Now()
		until := now.Add(-s.cfg.SweepGrace)
		// Rows due at or after the oldest the close path holds are being
		// worked through (a burst), not lost, while it progresses.
		if oldest, progress, ok := s.sched.Backlog(); ok && now.Sub(progress) < backlogGrace {
			if b := oldest.Add(-time.Millisecond); b.Before(until) {
				until = b
			}
		}
		p := hourglass.PendingDueParams{Until: until, Limit: pageSize, Parts: s.parts.Owned()}
		for ctx.Err() == nil {
			rows, err := s.table.Due(ctx, p)
			if err != nil {
				s.log.Warn("source: sweep failed; retrying", "err", err)
				break
			}
			if len(rows) == 0 {
				break
			}
			lost := rows[:0:0]
			for _, r := range rows {
				// A row the shop holds locked is retried alone
				// (closeAlone) for as long as it stays blocked: not lost.
				if s.extended.until(r.ID, now).IsZero() && !s.blocked.has(r.ID) {
					lost = append(lost, r)
				}
			}
			if len(lost) > 0 {
				s.cfg.Observer.SourceRecovered(s.src.Name, len(lost))
				s.stats.swept.Add(int64(len(lost)))
				s.log.Warn("source: sweeper found rows past their deadline and grace; closing them", "rows", len(lost))
				for _, r := range lost {
					s.causes.mark(r.ID, hourglass.CauseSweeper)
				}
				_ = s.schedule(ctx, lost)
			}
			if len(rows) < pageSize {
				break
			}
			last := rows[len(rows)-1]
			p.After, p.AfterID = last.At, last.ID
		}
		s.pruneReminders(ctx, now)
	}
}

// report publishes how many rows the source holds, every second.
func (s *runner) report(ctx context.Context) {
	for {
		s.cfg.Observer.SourceHeld(s.src.Name, s.sched.Pending()+s.sched.Queued())
		if timing.Sleep(ctx, s.clock, time.Second) != nil {
			return
		}
	}
}

type nopObserver struct{}

func (nopObserver) SourceClosed(string, time.Duration)  {}
func (nopObserver) SourceNoop(string)                   {}
func (nopObserver) SourceGuardError(string)             {}
func (nopObserver) SourceFailed(string)                 {}
func (nopObserver) SourceRecovered(string, int)         {}
func (nopObserver) SourceHeld(string, int)              {}
func (nopObserver) SourceBadRows(string, string, int)   {}
func (nopObserver) SourceLockWaits(string, int)         {}
func (nopObserver) SourceReminders(string, string, int) {}
