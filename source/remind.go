package source

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/timing/dispatch"
	"github.com/hourglass/hourglass/timing/timerloop"
	"github.com/hourglass/hourglass/timing/window"
)

// Reminders (Source.RemindBefore, issue #41): a row's reminder is its
// deadline, earlier, timed like the deadline: a wheel of its own keyed by
// row key, due at remind_at (the deadline rounded up to the millisecond,
// minus the lead), fed by a window loader of its own that reads the same
// index (SourceTable.Due, a lead later) and by the tail's new rows. When
// the wheel fires, SourceTable.Remind writes the source.expiring event in
// a transaction that checks the row is still pending with the deadline it
// was armed for and records (source, key, deadline), so a reminder is
// written at most once per deadline whichever node or retry comes second.
//
// A deadline the shop moves is seen as the close path sees it: the
// reminder armed for the old deadline finds the new one (Moved) and arms
// it; a row whose reminder was sent and whose deadline then moved later is
// found by the loader (when the new remind_at lies beyond its horizon) or
// by the close at the old deadline (SourceNoop, still pending), which arms
// the new reminder only if its time is still ahead. A row first seen with
// less time left than the lead (or whose remind_at passed while hourglass
// was down) is reminded at once if its deadline is still ahead, and
// counted skipped otherwise.

// reminderKeep is how long past its deadline a settled reminder's record
// is kept: after that no node arms its reminder again (a row that late is
// closed), and the runner prunes it.
const reminderKeep = 24 * time.Hour

// reminders is a source's reminder timing. Methods are safe for concurrent
// use.
type reminders struct {
	s     *runner
	lead  time.Duration
	sched *timerloop.Scheduler
	load  *window.Loader
	// loadP holds load for the ownership callback, which may run before
	// newReminders returns.
	loadP atomic.Pointer[window.Loader]
	// paged is set once the loader's first page is with the wheel (or
	// its first load failed: started must not wait for it).
	paged atomic.Bool
	// loaded is closed when the loader's first load ended (or failed):
	// the close path starts closing then (waitLoaded).
	loaded     chan struct{}
	loadedOnce sync.Once

	// retrying holds the deadline of each reminder armed again after the
	// shop held its row or the database's clock was behind: the wheel
	// holds it at its retry time, not at deadline − lead. At most maxHeld.
	mu       sync.Mutex
	retrying map[int64]time.Time
}

func newReminders(s *runner) *reminders {
	r := &reminders{s: s, lead: s.src.RemindBefore, retrying: map[int64]time.Time{}, loaded: make(chan struct{})}
	r.sched = timerloop.NewWheel(timerloop.Config{Name: "source " + s.src.Name + " reminders", Clock: s.cfg.Clock, Logger: s.log,
		Dispatch: dispatch.Config{Workers: 2, Batch: 500, RetryMax: retryMax, Logger: s.log, Clock: s.cfg.Clock}})
	// A tracker of its own: each loader takes the partitions it gains.
	parts := cluster.Track(s.cfg.Ownership, func() {
		if l := r.loadP.Load(); l != nil {
			l.Wake()
		}
	})
	r.load = window.New(window.Config{
		Name:         "source " + s.src.Name + " reminders",
		Sources:      []window.Source{r.due},
		Sink:         r.schedule,
		Window:       s.cfg.Window,
		LoadInterval: s.cfg.LoadInterval,
		MaxHeld:      maxHeld,
		Held:         func() int { return r.sched.Pending() + r.sched.Queued() },
		OnPage: func(loadedTo int64) {
			if loadedTo > window.InitialHorizon {
				r.firstPage()
			}
		},
		OnFirstLoad: func() {
			r.firstPage()
			r.loadedOnce.Do(func() { close(r.loaded) })
		},
		Parts:  parts,
		Clock:  s.cfg.Clock,
		Logger: s.log,
	})
	r.loadP.Store(r.load)
	for _, outcome := range []string{"sent", "skipped"} {
		s.cfg.Observer.SourceReminders(s.src.Name, outcome, 0) // in /metrics from the start
	}
	return r
}

func (r *reminders) firstPage() {
	r.paged.Store(true)
	r.s.maybeStarted()
}

// waitLoaded returns once the loader's first load ended (or ctx did).
// The close path waits for it before it closes anything: a row pending at
// start is then read by the reminders' loader before a close can take it
// out of the pending rows, so a reminder whose time passed while hourglass
// was down is sent or counted skipped, never lost unseen (the engine
// pages order reminders before deadlines for the same reason). Rows due
// meanwhile are held and closed as soon as it ends.
func (r *reminders) waitLoaded(ctx context.Context) {
	select {
	case <-r.loaded:
	case <-ctx.Done():
	}
}

// run times the reminders until ctx ends.
func (r *reminders) run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); r.load.Run(ctx) }()
	_ = r.sched.Run(ctx, r.deliver)
	<-done
}

// due is the loader's source: the pending rows due by p.Until plus the
// lead, as DueItems at their deadline minus the lead (the cursor shifted
// back and forth alike).
func (r *reminders) due(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	p.Until = p.Until.Add(r.lead)
	if !p.After.IsZero() {
		p.After = p.After.Add(r.lead)
	}
	rows, err := r.s.table.Due(ctx, p)
	if err != nil {
		return nil, err
	}
	return r.shift(rows), nil
}

// shift returns rows (key, deadline) as reminders (key, deadline − lead).
func (r *reminders) shift(rows []hourglass.DueItem) []hourglass.DueItem {
	out := make([]hourglass.DueItem, len(rows))
	for i, row := range rows {
		out[i] = hourglass.DueItem{ID: row.ID, At: row.At.Add(-r.lead)}
	}
	return out
}

// schedule hands reminders to the wheel, each at its deadline rounded up
// to the millisecond minus the lead (a whole number of milliseconds), so
// that the deadline it was armed for is At + lead exactly.
func (r *reminders) schedule(ctx context.Context, items []hourglass.DueItem) error {
	for i, it := range items {
		items[i].At = hourglass.CeilMilli(it.At)
	}
	return r.sched.Schedule(ctx, items)
}

// offer hands the loader rows (key, deadline) of this node's partitions
// the tail found: those whose reminder falls within its horizon are armed
// (at once when its time has passed), the later ones a load brings.
func (r *reminders) offer(ctx context.Context, rows []hourglass.DueItem) {
	_, _ = r.load.Offer(ctx, r.shift(rows)) // the sink never fails; beyond MaxHeld a load brings the rest
}

// moved arms the reminder of a row the close found still pending with
// deadline (moved later by the shop, after its reminder was settled),
// when that reminder's time is still ahead of now.
func (r *reminders) moved(ctx context.Context, key int64, deadline, now time.Time) {
	if at := hourglass.CeilMilli(deadline).Add(-r.lead); at.After(now) {
		_, _ = r.load.Offer(ctx, []hourglass.DueItem{{ID: key, At: at}})
	}
}

// deliver settles the reminders the wheel fired, of the partitions this
// node still owns, and arms again those the transaction left: a row found
// at another deadline (at its own reminder time, at once when that passed:
// it was not reminded for it), one the shop held locked or not yet due by
// the database's clock (soon).
func (r *reminders) deliver(ctx context.Context, due []hourglass.DueItem) error {
	defer r.load.Released()
	rows := make([]hourglass.DueItem, 0, len(due))
	r.mu.Lock()
	for _, d := range due {
		deadline, retry := r.retrying[d.ID]
		if retry {
			delete(r.retrying, d.ID)
		} else {
			deadline = d.At.Add(r.lead)
		}
		if r.s.parts.Has(d.ID) {
			rows = append(rows, hourglass.DueItem{ID: d.ID, At: deadline})
		}
	}
	r.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	res, err := r.s.table.Remind(ctx, rows)
	if err != nil {
		return err // the dispatcher retries the batch (a reminder recorded is not sent again)
	}
	now := r.s.clock.Now()
	var (
		again         []hourglass.DueItem
		sent, skipped int
		latest        time.Duration
	)
	for _, x := range res {
		switch x.Outcome {
		case hourglass.SourceReminderSent:
			sent++
			latest = max(latest, x.SentAt.Sub(x.RemindAt))
		case hourglass.SourceReminderSkipped:
			skipped++
		case hourglass.SourceReminderMoved:
			again = append(again, hourglass.DueItem{ID: x.Key, At: x.RemindAt})
		case hourglass.SourceReminderBlocked, hourglass.SourceReminderNotDue:
			if r.retry(x.Key, x.Deadline) {
				again = append(again, hourglass.DueItem{ID: x.Key, At: later(x.RemindAt, now)})
			}
		}
	}
	if sent > 0 {
		r.s.cfg.Observer.SourceReminders(r.s.src.Name, "sent", sent)
		r.s.log.Debug("source: reminders sent", "rows", sent, "latest_by", latest)
	}
	if skipped > 0 {
		r.s.cfg.Observer.SourceReminders(r.s.src.Name, "skipped", skipped)
	}
	if len(again) > 0 {
		_ = r.sched.Schedule(ctx, again)
	}
	return nil
}

// retry records the deadline of a reminder armed again at another time
// than deadline − lead, and reports whether there was room (beyond
// maxHeld such reminders, one more is dropped with a warning: never
// sent, rather than sent for a wrong deadline).
func (r *reminders) retry(key int64, deadline time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.retrying[key]; !ok && len(r.retrying) >= maxHeld {
		r.s.log.Warn("source: too many reminders waiting for a retry; dropping one", "key", key, "deadline", deadline)
		return false
	}
	r.retrying[key] = deadline
	return true
}

// pruneReminders deletes a page of the source's settled reminders a day
// past their deadline, on the node that owns partition 0 (as retention's
// chores run on one node), once per sweep.
func (s *runner) pruneReminders(ctx context.Context, now time.Time) {
	if !s.parts.Has(0) {
		return
	}
	if _, err := s.table.PruneReminders(ctx, now.Add(-reminderKeep), pageSize); err != nil && ctx.Err() == nil {
		s.log.Warn("source: prune settled reminders failed; retrying at the next sweep", "err", err)
	}
}
