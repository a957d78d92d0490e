package bulk

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// Store is what a Runner needs of the database.
type Store interface {
	hourglass.BulkStore
	Lister
}

// Defaults of Config.
const (
	// LeaseDefault is how long a runner's claim on an action lasts without
	// a page written: a node that dies mid-way hands its action over
	// within about this long.
	LeaseDefault = 10 * time.Second
	// PollDefault is how often an idle runner looks for an action to
	// claim (Wake makes it look at once).
	PollDefault = time.Second
	// PageDefault is the most items a page applies in one transaction.
	PageDefault = 500
	// ConcurrencyDefault is how many actions one runner runs at once.
	ConcurrencyDefault = 2
	// RetentionDefault is how long a finished action is kept.
	RetentionDefault = 7 * 24 * time.Hour
	// pruneEvery is how often a runner prunes finished actions.
	pruneEvery = 10 * time.Minute
	// retryDefault is the wait after a failed read or write before the
	// runner tries again.
	retryDefault = time.Second
)

// Config configures a Runner; the zero value of each field is its
// documented default.
type Config struct {
	Store Store
	// Owner names this runner in the leases it takes: unique per process
	// (the node id and a random part).
	Owner string
	Clock hourglass.TimerClock
	Log   *slog.Logger
	// Lease, Poll, Page, Concurrency, Retention: see the defaults.
	Lease       time.Duration
	Poll        time.Duration
	Page        int
	Concurrency int
	Retention   time.Duration
	// Retried, when set, is told the dead letters a page retried, after
	// its commit (the webhook service schedules them).
	Retried func([]hourglass.DeliveryTimer)
	// Observe, when set, is told how many actions this runner runs, after
	// each change.
	Observe func(running int)
}

// Validate reports an invalid_argument error for a config that cannot run.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "bulk: Store is required")
	case c.Owner == "":
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "bulk: Owner is required")
	case c.Lease < 0 || c.Poll < 0 || c.Page < 0 || c.Concurrency < 0 || c.Retention < 0:
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "bulk: Lease, Poll, Page, Concurrency and Retention must not be negative")
	case c.Page > hourglass.MaxBulkIDs:
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "bulk: Page must be at most %d, got %d", hourglass.MaxBulkIDs, c.Page)
	}
	return nil
}

// Runner claims and runs filtered bulk actions. Run runs it; Wake makes it
// look for work at once. Safe for concurrent use.
type Runner struct {
	cfg  Config
	wake chan struct{}

	mu      sync.Mutex
	running int
}

// New returns a Runner for cfg. Errors: cfg.Validate's.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Clock = cmp.Or[hourglass.TimerClock](cfg.Clock, hourglass.SystemClock{})
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	cfg.Lease = cmp.Or(cfg.Lease, LeaseDefault)
	cfg.Poll = cmp.Or(cfg.Poll, PollDefault)
	cfg.Page = cmp.Or(cfg.Page, PageDefault)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	return &Runner{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Wake makes an idle Run look for an action to claim now (one was just
// created). It never blocks.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run claims and runs actions until ctx ends, then waits for the actions
// it runs to stop (each after its page in flight) and returns nil. A
// database error is logged and retried.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{}, 1)
	lastPrune := time.Time{}
	for {
		if now := r.cfg.Clock.Now(); now.Sub(lastPrune) >= pruneEvery {
			lastPrune = now
			r.prune(ctx, now)
		}
		for r.count() < r.cfg.Concurrency {
			a, ok, err := r.cfg.Store.ClaimBulkAction(ctx, r.cfg.Owner, r.cfg.Lease)
			if err != nil {
				if ctx.Err() == nil {
					r.cfg.Log.Warn("bulk: claim an action", "err", err)
				}
				break
			}
			if !ok {
				break
			}
			r.add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					r.add(-1)
					select { // a wake-up: one pending is enough
					case done <- struct{}{}:
					default:
					}
				}()
				r.run(ctx, a)
			}()
		}
		poll := r.cfg.Clock.NewTimer(r.cfg.Poll)
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil
		case <-r.wake:
		case <-done:
		case <-poll.C():
		}
		poll.Stop()
	}
}

func (r *Runner) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

func (r *Runner) add(n int) {
	r.mu.Lock()
	r.running += n
	running := r.running
	r.mu.Unlock()
	if r.cfg.Observe != nil {
		r.cfg.Observe(running)
	}
}

// prune deletes the actions that finished more than Retention ago, a
// batch at a time.
func (r *Runner) prune(ctx context.Context, now time.Time) {
	for range 100 {
		n, err := r.cfg.Store.PruneBulkActions(ctx, now.Add(-r.cfg.Retention), 1000)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Log.Warn("bulk: prune finished actions", "err", err)
			}
			return
		}
		if n < 1000 {
			return
		}
	}
}

// run runs the claimed action a until it finishes, its lease is lost (a
// stop, or another node took it over after a stall) or ctx ends: then it
// releases the lease, so another node takes the action over at once.
func (r *Runner) run(ctx context.Context, a hourglass.BulkAction) {
	defer func() {
		if ctx.Err() == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if err := r.cfg.Store.ReleaseBulkAction(rctx, a.ID, r.cfg.Owner); err != nil {
			r.cfg.Log.Warn("bulk: release an action on shutdown (another node takes it when its lease runs out)", "bulk_action", a.ID, "err", err)
		}
	}()
	r.runAction(ctx, a)
}

// releaseTimeout bounds the release of a lease on shutdown.
const releaseTimeout = 2 * time.Second

func (r *Runner) runAction(ctx context.Context, a hourglass.BulkAction) {
	log := r.cfg.Log.With("bulk_action", a.ID, "action", a.Action)
	var spec Spec
	err := json.Unmarshal(a.Spec, &spec)
	if err == nil {
		err = spec.Check(a.Action)
	}
	cur, cerr := parseCursor(a.Cursor)
	if err == nil {
		err = cerr
	}
	if err != nil {
		// Not one this binary can run: say so rather than retry for ever.
		log.Error("bulk: cannot run action", "err", err)
		r.write(ctx, nil, &hourglass.BulkProgress{ID: a.ID, Owner: r.cfg.Owner, Cursor: a.Cursor, Finish: hourglass.BulkFailed, Error: hourglass.ErrorMessage(err)})
		return
	}
	size := r.cfg.Page
	if a.Rate > 0 {
		size = min(size, a.Rate)
	}
	// The rate is kept over the items applied since the claim: after
	// k items, the next page waits until k/rate seconds after start.
	start, applied := r.cfg.Clock.Now(), 0
	for ctx.Err() == nil {
		if a.Rate > 0 && applied > 0 {
			due := start.Add(time.Duration(float64(applied) / float64(a.Rate) * float64(time.Second)))
			if wait := due.Sub(r.cfg.Clock.Now()); wait > 0 {
				if timing.Sleep(ctx, r.cfg.Clock, wait) != nil {
					return
				}
			}
		}
		p, err := readPage(ctx, r.cfg.Store, a.Action, spec, cur, size)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("bulk: read a page", "err", err)
				_ = timing.Sleep(ctx, r.cfg.Clock, retryDefault)
			}
			continue
		}
		prog := &hourglass.BulkProgress{ID: a.ID, Owner: r.cfg.Owner, Lease: r.cfg.Lease, Cursor: cur.String(), Matched: int64(len(p.items))}
		if len(p.items) > 0 {
			prog.Cursor = p.next.String()
		}
		if len(p.items) < size {
			prog.Finish = hourglass.BulkDone
		}
		res, ok := r.write(ctx, p.items, prog)
		if !ok {
			return
		}
		var retried []hourglass.DeliveryTimer
		for _, x := range res {
			if x.Retried.ID != 0 {
				retried = append(retried, x.Retried)
			}
		}
		if len(retried) > 0 && r.cfg.Retried != nil {
			r.cfg.Retried(retried)
		}
		if prog.Finish != "" {
			log.Info("bulk: action done")
			return
		}
		cur, applied = p.next, applied+len(p.items)
	}
}

// write applies items with prog (the store counts the items done and
// failed), again after a database error. ok is false when the action is no
// longer this runner's (stopped, or taken over) or ctx ended.
func (r *Runner) write(ctx context.Context, items []hourglass.BulkItem, prog *hourglass.BulkProgress) ([]hourglass.BulkItemResult, bool) {
	for ctx.Err() == nil {
		res, err := r.cfg.Store.ApplyBulk(ctx, items, prog)
		if err == nil {
			return res, true
		}
		if errors.Is(err, &hourglass.Error{Code: hourglass.CodeBulkLeaseLost}) {
			r.cfg.Log.Info("bulk: action no longer ours (stopped or taken over)", "bulk_action", prog.ID)
			return nil, false
		}
		if ctx.Err() == nil {
			r.cfg.Log.Warn("bulk: apply a page", "bulk_action", prog.ID, "err", err)
			_ = timing.Sleep(ctx, r.cfg.Clock, retryDefault)
		}
	}
	return nil, false
}
