// Package sqlpoll is the scheduled-scan delay mechanism, done properly: it
// holds no timers at all. The orders table is the schedule; every
// PollInterval the poller pages through the pending orders whose deadline
// has passed, oldest first, using the index on (status, deadline), and
// delivers them in batches of Batch. Delivery closes them with the store's
// compare-and-set, which takes them out of the next scan.
//
// # One scan
//
// Scans start every PollInterval, give or take a random tenth (so that
// pollers started together drift apart). A scan fixes until = now, then
// reads pages of at most Batch orders with status pending_payment and
// deadline <= until, ordered by (deadline, id), each page starting strictly
// after the last (deadline, id) of the one before (a keyset cursor, so a
// page costs O(log n + Batch) on the index whatever the backlog), and
// delivers each page before reading the next.
// The scan ends at a short page, or at the first failed delivery: the
// orders of that page, and of every page after it, are still pending and the
// next scan reads them again.
//
// # Several pollers
//
// Databases with row locks let concurrent pollers split the work by
// claiming each page with SELECT … FOR UPDATE SKIP LOCKED. SQLite, the only
// store today, has a single writer and no SKIP LOCKED, so pages are read
// without claiming: two pollers over one database may read and deliver the
// same due order, and the close, a compare-and-set on the order's status,
// makes the second delivery a no-op. A store that can claim should offer it
// through a separate, optional interface next to Store, as database/sql
// does with its optional driver interfaces.
//
// # Failure behaviour
//
// Timers are rows, so nothing is lost when the process dies: the next
// process's first scan finds every order that fell due meanwhile
// (Info().Durable is true). A failed read ends Run with an error (the
// engine restarts it with backoff and sweeps in the meantime); a failed
// delivery is retried at the next scan. Lateness is bounded by the poll
// interval (plus its jitter) and the time a scan takes: on average half an
// interval.
package sqlpoll

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hourglass/hourglass"
)

// Defaults and limits of Config.
const (
	PollIntervalDefault = time.Second
	PollIntervalMin     = 10 * time.Millisecond
	PollIntervalMax     = time.Hour
	BatchDefault        = 500
	BatchMax            = 100_000
)

// Store is what sqlpoll needs of the order database: hourglass.Store
// satisfies it.
type Store interface {
	// PendingDue returns up to limit pending orders with deadline <= until,
	// ordered by (deadline, id) and strictly after the cursor (after,
	// afterID).
	PendingDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error)
}

// TimerStore is an optional interface of a Store that keeps clients'
// timers (hourglass.TimerStore): each scan delivers the scheduled timers
// due as well, after the orders.
type TimerStore interface {
	TimersDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error)
}

// ReminderStore is an optional interface of a Store that sends order
// reminders (hourglass.ReminderStore): each scan delivers the reminders
// due as well, before the orders (a reminder precedes its deadline).
type ReminderStore interface {
	RemindersDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error)
}

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	// Store is the order database to scan. Required.
	Store Store
	// Clock gives "now" to each scan and times the polls (default the
	// system clock; see hourglass.WithTimers).
	Clock  hourglass.Clock
	Logger *slog.Logger
	// PollInterval is the time between the starts of two scans, ±10%
	// (default PollIntervalDefault, PollIntervalMin..PollIntervalMax).
	PollInterval time.Duration
	// Batch is the most orders read and delivered at once (default
	// BatchDefault, 1..BatchMax).
	Batch int
	// Parts, when set, returns the partitions this node owns (a cluster):
	// each scan reads only their orders. Nil: every order.
	Parts func() hourglass.Parts
}

// Validate reports a configuration error, naming the field and its range.
func (c Config) Validate() error {
	if c.Store == nil {
		return errors.New("sqlpoll: Store is required (the order database to scan)")
	}
	if c.PollInterval != 0 && (c.PollInterval < PollIntervalMin || c.PollInterval > PollIntervalMax) {
		return fmt.Errorf("sqlpoll: poll interval must be between %s and %s, got %s", PollIntervalMin, PollIntervalMax, c.PollInterval)
	}
	if c.Batch < 0 || c.Batch > BatchMax {
		return fmt.Errorf("sqlpoll: Batch must be between 1 and %d, got %d", BatchMax, c.Batch)
	}
	return nil
}

// Scheduler polls the order database for due orders. Its methods are safe
// for concurrent use; Run must not be called twice at once (two Schedulers
// over one database are fine: see the package comment).
type Scheduler struct {
	store    Store
	clock    hourglass.TimerClock
	log      *slog.Logger
	interval time.Duration
	batch    int
	parts    func() hourglass.Parts
}

var _ hourglass.Scheduler = (*Scheduler)(nil)

// New validates cfg and checks that the store answers a scan (one indexed
// read of at most one row), so a database that cannot be read fails at
// start-up. Errors are a configuration error or the failed read, wrapped.
func New(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		store:    cfg.Store,
		clock:    hourglass.WithTimers(cfg.Clock),
		log:      cmp.Or(cfg.Logger, slog.Default()),
		interval: cmp.Or(cfg.PollInterval, PollIntervalDefault),
		batch:    cmp.Or(cfg.Batch, BatchDefault),
		parts:    cfg.Parts,
	}
	if _, err := s.store.PendingDue(ctx, hourglass.PendingDueParams{Until: s.clock.Now(), Limit: 1}); err != nil {
		return nil, fmt.Errorf("sqlpoll: check the order database can be scanned: %w", err)
	}
	return s, nil
}

// Info implements hourglass.Scheduler: Durable, because the timers are the
// database's rows.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "sqlpoll", Feed: hourglass.FeedNone, Durable: true}
}

// Schedule implements hourglass.Scheduler. The database is the schedule: an
// order is scheduled by committing it, so Schedule does nothing and returns
// nil (the engine does not call it for a FeedNone mechanism).
func (s *Scheduler) Schedule(context.Context, []hourglass.DueItem) error { return nil }

// Run implements hourglass.Scheduler: it scans at once, then again each
// PollInterval (±10%) after a scan starts, until ctx ends, and then returns
// nil. A scan that takes longer than the interval is followed by the next
// one at once. A failed delivery is logged and retried at the next scan; a
// failed read ends Run with the wrapped error.
//
// The jitter keeps pollers that were started together (several processes
// over one database) from scanning in lockstep, which would make them read
// and deliver every due order twice.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	timer := s.clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		}
		timer.Reset(jitter(s.interval)) // from the scan's start
		if err := s.scan(ctx, deliver); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// jitter returns d changed by a random amount within ±10%.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// scan delivers, page by page, every pending order (and client timer) due
// at the scan's start. It returns only read errors; a failed delivery ends
// the scan early.
func (s *Scheduler) scan(ctx context.Context, deliver hourglass.Deliver) error {
	until := s.clock.Now()
	sources := []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error){s.store.PendingDue}
	if rs, ok := s.store.(ReminderStore); ok {
		sources = append([]func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error){rs.RemindersDue}, sources...)
	}
	if ts, ok := s.store.(TimerStore); ok {
		sources = append(sources, ts.TimersDue)
	}
	for _, due := range sources {
		if done, err := s.scanSource(ctx, due, until, deliver); err != nil || !done {
			return err
		}
	}
	return nil
}

// scanSource delivers one source's due items; done is false when a failed
// delivery ended it early.
func (s *Scheduler) scanSource(ctx context.Context, due func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error), until time.Time, deliver hourglass.Deliver) (done bool, err error) {
	after, afterID := time.UnixMilli(0), int64(0)
	for {
		var parts hourglass.Parts
		if s.parts != nil {
			parts = s.parts()
		}
		page, err := due(ctx, hourglass.PendingDueParams{After: after, AfterID: afterID, Until: until, Limit: s.batch, Parts: parts})
		if err != nil {
			return false, fmt.Errorf("sqlpoll: read due orders: %w", err)
		}
		if len(page) == 0 {
			return true, nil
		}
		if err := deliver(ctx, page); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sqlpoll: delivery failed; the orders stay pending and the next scan retries them",
					"orders", len(page), "retry_in", s.interval, "err", err)
			}
			return false, nil
		}
		if len(page) < s.batch {
			return true, nil
		}
		last := page[len(page)-1]
		after, afterID = last.At, last.ID
	}
}

// Close implements hourglass.Scheduler. The store belongs to the caller, so
// there is nothing to release; it returns nil.
func (s *Scheduler) Close() error { return nil }
