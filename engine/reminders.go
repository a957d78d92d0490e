package engine

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// ReminderObserver is an optional interface of an Observer: Reminded is
// called once per reminder the engine settled (sent, or skipped: r.Skipped);
// swept is true when the sweeper (or start-up recovery) found it.
type ReminderObserver interface {
	Reminded(r hourglass.RemindedOrder, swept bool)
}

// Reminder sending limits.
const (
	// RemindBatch is the most reminders one RemindOrders call settles:
	// about what a store commits of a burst's closes in one transaction
	// (SQLite's urgent budget), so a close due meanwhile waits for at most
	// one such transaction, and a burst of reminders pays a commit per
	// RemindBatch of them, not per 256 (docs/benchmarks/reminders.md).
	RemindBatch = 1024
	// RemindSenders is how many RemindOrders calls run at once: while one
	// commits, the next waits in the writer's queue.
	RemindSenders = 2
	// RemindYieldMax is how long a sender waits at most, before each
	// batch, while the close path has due deadlines queued: closes first,
	// but a reminder is never starved.
	RemindYieldMax = 100 * time.Millisecond
	// RemindQueueMax is the most reminders delivered and waiting to be
	// sent; beyond it a delivery's reminders are dropped, and the sweeper
	// sends them from the database (their remind_at stays set).
	RemindQueueMax = 1 << 20
)

// reminders is the engine's part in order reminders (issue #41): with a
// store that sends them (hourglass.ReminderStore), a reminder is one more
// due item (hourglass.ReminderID), loaded, scheduled, relayed, swept and
// reclaimed as an order's deadline is, through the same mechanism. When
// the mechanism delivers it, it is queued for the sender, a goroutine of
// its own, so that a burst of reminders never holds up the closes due
// beside it (the store also writes closes first); the sender settles them
// through RemindOrders, which checks in one transaction that the order is
// still pending. A queued reminder is in the database until sent, so a
// crash loses none: the restart loads it again. A reminder whose time
// passed while hourglass was down is sent at start-up if its order's
// deadline is still ahead, and skipped otherwise (the store decides, at
// its now).
type reminders struct {
	store hourglass.ReminderStore // nil: the store sends none
	obs   ReminderObserver        // nil: not told
	log   *slog.Logger
	clock hourglass.TimerClock
	// busy reports whether the close path has due items queued (nil: the
	// mechanism does not say).
	busy func() bool

	mu       sync.Mutex
	queue    []hourglass.DueItem // delivered, not yet sent, about in due order
	inFlight map[int]time.Time   // sender → the earliest due time of the batch it sends
	wake     chan struct{}
}

func newReminders(store Store, obs Observer, log *slog.Logger, clock hourglass.TimerClock, sched hourglass.Scheduler) *reminders {
	r := &reminders{log: log, clock: clock, wake: make(chan struct{}, 1), inFlight: map[int]time.Time{}}
	if q, ok := sched.(interface{ Queued() int }); ok {
		r.busy = func() bool { return q.Queued() > 0 }
	}
	r.store, _ = store.(hourglass.ReminderStore) // optional: a store without reminders only closes
	r.obs, _ = obs.(ReminderObserver)            // optional
	return r
}

// sources puts the reminders' due source before the deadlines' sources:
// a reminder falls due before its order's deadline, so a load or sweep
// that finds both (after a restart) settles the reminder first, and a
// reminder whose order then closes is counted skipped rather than
// dropped unseen with the close.
func (r *reminders) sources(src []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error)) []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	if r.store == nil {
		return src
	}
	return append([]func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error){r.store.RemindersDue}, src...)
}

// sweepSources is sources for the sweeper: reminders queued for the
// sender are not missed ones, so the reminders' source stops before the
// earliest of them.
func (r *reminders) sweepSources(src []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error)) []func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	if r.store == nil {
		return src
	}
	due := func(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
		if oldest, ok := r.oldest(); ok && !p.Until.Before(oldest) {
			p.Until = oldest.Add(-time.Millisecond)
		}
		return r.store.RemindersDue(ctx, p)
	}
	return append([]func(context.Context, hourglass.PendingDueParams) ([]hourglass.DueItem, error){due}, src...)
}

// oldest returns the earliest due time among the reminders queued or
// being sent.
func (r *reminders) oldest() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var at time.Time
	for _, t := range r.queue {
		if at.IsZero() || t.At.Before(at) {
			at = t.At
		}
	}
	for _, f := range r.inFlight {
		if at.IsZero() || f.Before(at) {
			at = f
		}
	}
	return at, !at.IsZero()
}

// enqueue hands delivered reminders to the sender; those beyond
// RemindQueueMax are dropped (the sweeper sends them).
func (r *reminders) enqueue(due []hourglass.DueItem) {
	if len(due) == 0 || r.store == nil {
		return
	}
	r.mu.Lock()
	room := RemindQueueMax - len(r.queue)
	if dropped := len(due) - room; dropped > 0 {
		r.log.Warn("engine: the reminder queue is full; the sweeper sends the rest from the database", "dropped", dropped)
		due = due[:max(room, 0)]
	}
	r.queue = append(r.queue, due...)
	r.mu.Unlock()
	wake(r.wake)
}

// run sends the queued reminders until ctx ends, with RemindSenders
// senders taking a batch at a time, each with capped backoff after a
// failure (its batch stays queued).
func (r *reminders) run(ctx context.Context, sup timing.Supervisor) {
	if r.store == nil {
		return
	}
	var wg sync.WaitGroup
	for w := range RemindSenders {
		wg.Go(func() { r.sender(ctx, w, sup) })
	}
	wg.Wait()
}

// sender is one of run's senders.
func (r *reminders) sender(ctx context.Context, w int, sup timing.Supervisor) {
	sup.Run(ctx, func(ctx context.Context) error {
		for {
			r.yield(ctx)
			r.mu.Lock()
			n := min(len(r.queue), RemindBatch)
			batch := slices.Clone(r.queue[:n])
			if n > 0 {
				r.inFlight[w] = slices.MinFunc(batch, func(a, b hourglass.DueItem) int { return a.At.Compare(b.At) }).At
			}
			r.queue = r.queue[n:]
			more := len(r.queue) > 0
			r.mu.Unlock()
			if more {
				wake(r.wake) // another sender takes the next batch
			}
			if n == 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-r.wake:
					continue
				}
			}
			ids := make([]int64, len(batch))
			for i, t := range batch {
				ids[i] = hourglass.ReminderOrderID(t.ID)
			}
			_, err := r.send(ctx, ids, false)
			r.mu.Lock()
			if err != nil {
				r.queue = append(batch, r.queue...)
			}
			delete(r.inFlight, w)
			r.mu.Unlock()
			if err != nil {
				return err
			}
		}
	})
}

// yield waits, up to RemindYieldMax, while the close path has due items
// queued, so that a burst of reminders takes the database only when the
// closes due beside it do not need it.
func (r *reminders) yield(ctx context.Context) {
	for waited := time.Duration(0); r.busy != nil && r.busy() && waited < RemindYieldMax; waited += 2 * time.Millisecond {
		if timing.Sleep(ctx, r.clock, 2*time.Millisecond) != nil {
			return
		}
	}
}

// send settles the reminders of orders (order ids) and returns how many
// it settled; on error the caller retries them (RemindOrders is
// idempotent).
func (r *reminders) send(ctx context.Context, orders []int64, swept bool) (int, error) {
	if len(orders) == 0 || r.store == nil {
		return 0, nil
	}
	done, err := r.store.RemindOrders(ctx, orders)
	if err != nil {
		return 0, err
	}
	if r.obs != nil {
		for _, d := range done {
			r.obs.Reminded(d, swept)
		}
	}
	return len(done), nil
}
