// Package window (part of the timing core, package timing) is the window
// loader shared by everything hourglass times in memory (order deadlines, client timers, webhook delivery attempts): the
// database holds every pending item with the time it is due; the loader
// pages into an in-memory scheduler only what falls due before a horizon
// (now + Window), moves the horizon forward every LoadInterval, loads the
// items of partitions this node gains (package cluster), and takes items
// created meanwhile (Offer) when they fall inside the horizon. So memory
// follows the rate of items due soon, not how many are pending, and a
// restart loses nothing: the first load brings back every item due (overdue
// ones first).
//
// The horizon is the invariant: every pending item due at or before it is
// with the scheduler, or in a page being loaded, or offered. Load raises
// the horizon before it queries, so an item committed during a load is
// either seen by the query or accepted by Offer. A failed load lowers it
// back so the next load retries the range. When the scheduler holds
// Config.MaxHeld items, the loader stops short and lowers the horizon to
// just before the last item it loaded; Released wakes it again once half
// has drained, so a backlog of millions costs memory for MaxHeld.
package window

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// Defaults of Config.
const (
	WindowDefault       = 2 * time.Minute
	LoadIntervalDefault = 30 * time.Second
	PageSizeDefault     = 1000
	RetryMaxDefault     = 5 * time.Second
)

// Source pages pending items from the database: up to p.Limit items due at
// or before p.Until, in (due time, id) order, strictly after the cursor
// (p.After, p.AfterID), of the partitions p.Parts (nil: all), as
// hourglass.DueItem{ID: the item's id, At: when it is due}.
// Store.PendingDue and TimerStore.TimersDue are Sources.
type Source func(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error)

// Sink takes loaded or offered items: the scheduler's Schedule. It must be
// idempotent (an item may be handed over twice).
type Sink func(ctx context.Context, items []hourglass.DueItem) error

// Parts follows the partitions this node owns, for a loader that loads
// only theirs (cluster.Tracker is one). Its methods must be safe for
// concurrent use.
type Parts interface {
	// Owned returns the partitions owned now (nil: every partition).
	Owned() hourglass.Parts
	// TakeGained returns the partitions gained since the last call, whose
	// items the loader must load, and forgets them.
	TakeGained() hourglass.Parts
	// Regain marks parts as gained again: their load failed.
	Regain(parts hourglass.Parts)
}

// Config configures a Loader. Zero values mean the defaults.
type Config struct {
	// Name prefixes log messages ("engine", "webhook").
	Name string
	// Sources are paged in turn, up to one shared horizon.
	Sources []Source
	Sink    Sink
	// Window is how far ahead of now the horizon is kept; LoadInterval how
	// often it moves (must be less than Window). PageSize is the most
	// items per query.
	Window, LoadInterval time.Duration
	PageSize             int
	// MaxHeld, when positive, bounds what the scheduler holds: Held
	// reports how many it does (scheduled, queued and in flight).
	MaxHeld int
	Held    func() int
	// Parts follows the partitions this node owns (nil: all of them). It
	// must call Loader.Wake when it gains partitions (cluster.Track's
	// onGain) for the loader to load them at once.
	Parts Parts
	// OnPage is called as Load makes progress, with the latest due time,
	// unix ms, up to which every item of every source is with the sink.
	// OnSourcePage is called at the same points with the index in Sources
	// of the source that made progress and that source's own progress:
	// sources are paged in turn, so every item the earlier sources have
	// within the load is with the sink then, while the later ones have not
	// been read yet (OnPage's least progress stays below their first
	// page until every earlier source has been paged to the end).
	// OnFirstLoad is called when the first load ended, and again after
	// each of its failed attempts (Run retries it).
	OnPage       func(loadedTo int64)
	OnSourcePage func(source int, loadedTo int64)
	OnFirstLoad  func()
	// RetryMax caps the backoff of a failed first load.
	RetryMax time.Duration
	// Clock gives now and times the loads (default the system clock).
	Clock  hourglass.Clock
	Logger *slog.Logger
}

// Loader keeps a scheduler fed with the items due within the window. All
// methods are safe for concurrent use; Run is called once.
type Loader struct {
	cfg   Config
	clock hourglass.TimerClock
	log   *slog.Logger

	mu      sync.Mutex
	horizon int64 // unix ms; see the package comment
	// truncated: the last load stopped at MaxHeld, short of its target.
	truncated bool

	wake chan struct{}
}

// New returns a loader; it loads nothing until Run (or Load).
func New(cfg Config) *Loader {
	cfg.Window = cmp.Or(cfg.Window, WindowDefault)
	cfg.LoadInterval = cmp.Or(cfg.LoadInterval, LoadIntervalDefault)
	cfg.PageSize = cmp.Or(cfg.PageSize, PageSizeDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	if cfg.Held == nil {
		cfg.MaxHeld = 0
	}
	l := &Loader{cfg: cfg, clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger, wake: make(chan struct{}, 1)}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.horizon = InitialHorizon // nothing offered is accepted until the first load
	return l
}

// Wake makes Run load now: partitions were gained (pass it as the
// Tracker's onGain), or room came back.
func (l *Loader) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// InitialHorizon is a Loader's horizon before its first load, unix ms:
// below every time. OnPage reports it (as the least progress) until every
// source has had a page.
const InitialHorizon = -1 << 62

// Horizon returns the horizon, unix ms: every pending item due at or before
// it is with the scheduler (or being loaded, or offered).
func (l *Loader) Horizon() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.horizon
}

// Offer hands the sink the items due at or before the horizon (later ones
// a load brings in time) and reports whether it took them all. At MaxHeld
// it takes only the earliest that fit and lowers the horizon to before the
// first it left, so a later load brings those, and returns false. Items
// already held may be offered again.
func (l *Loader) Offer(ctx context.Context, items []hourglass.DueItem) (bool, error) {
	l.mu.Lock()
	horizon := l.horizon
	l.mu.Unlock()
	// A horizon that moves meanwhile changes nothing: an item handed over
	// beyond a lowered horizon is merely held early, and a load that raises
	// it queries after raising, so it sees an item not taken here.
	in := items
	for i, t := range items {
		if hourglass.UnixMilli(t.At) > horizon { // copy only when some are left out
			in = slices.Clone(items[:i])
			for _, t := range items[i+1:] {
				if hourglass.UnixMilli(t.At) <= horizon {
					in = append(in, t)
				}
			}
			break
		}
	}
	if len(in) == 0 {
		return true, nil
	}
	if l.cfg.MaxHeld <= 0 {
		return true, l.cfg.Sink(ctx, in)
	}
	if len(in) > 1 {
		if len(in) == len(items) {
			in = slices.Clone(in) // hand wants due order; the caller's slice stays as it is
		}
		slices.SortFunc(in, func(a, b hourglass.DueItem) int { return a.At.Compare(b.At) })
	}
	return l.hand(ctx, in)
}

// Released tells the loader held items finished (fired and delivered): if
// the last load stopped at MaxHeld and half of that has drained, Run loads
// again.
func (l *Loader) Released() {
	if l.cfg.MaxHeld <= 0 {
		return
	}
	l.mu.Lock()
	again := l.truncated && l.cfg.Held() <= l.cfg.MaxHeld/2
	if again {
		l.truncated = false
	}
	l.mu.Unlock()
	if again {
		l.Wake()
	}
}

// Run loads the first window (retrying with capped backoff until it
// succeeds), then moves the window every LoadInterval and loads gained
// partitions and freed room when woken, until ctx ends. Load errors are
// logged and retried, never returned.
func (l *Loader) Run(ctx context.Context) {
	first := timing.Supervisor{
		Clock:   l.clock,
		Backoff: timing.Backoff{Min: 50 * time.Millisecond, Max: l.cfg.RetryMax},
		Failed: func(err error, retryIn time.Duration) {
			l.firstLoadDone() // the sweeper takes what the failed load did not reach
			l.log.Error(l.cfg.Name+": loading the first window failed; retrying", "retry_in", retryIn, "err", err)
		},
	}
	err := first.Run(ctx, l.Load)
	l.firstLoadDone()
	if err != nil {
		return // ctx ended
	}
	t := l.clock.NewTicker(l.cfg.LoadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-l.wake:
		}
		if err := l.LoadGained(ctx); err != nil && ctx.Err() == nil {
			l.log.Error(l.cfg.Name+": loading the window of partitions taken over failed; retrying", "err", err)
			timing.Sleep(ctx, l.clock, min(l.cfg.RetryMax, time.Second))
			l.Wake()
		}
		if err := l.Load(ctx); err != nil && ctx.Err() == nil {
			l.log.Error(l.cfg.Name+": loading the window failed; retrying at the next interval", "err", err)
		}
	}
}

func (l *Loader) firstLoadDone() {
	if l.cfg.OnFirstLoad != nil {
		l.cfg.OnFirstLoad()
	}
}

// Load pages every pending item due up to now+Window and past the current
// horizon into the sink, from every source, stopping early at MaxHeld.
// On error the horizon is lowered so the next Load retries the range.
func (l *Loader) Load(ctx context.Context) error {
	target := hourglass.UnixMilli(l.clock.Now().Add(l.cfg.Window))
	l.mu.Lock()
	from := l.horizon
	if target <= from {
		l.mu.Unlock()
		return nil
	}
	// Raise the horizon first: an item committed from now on is accepted
	// by Offer; one committed earlier is visible to the queries below.
	l.horizon = target
	l.truncated = false
	l.mu.Unlock()
	start, startID := hourglass.FromUnixMilli(max(from, 0)), int64(math.MaxInt64)
	if from < 0 {
		start, startID = hourglass.FromUnixMilli(0), 0
	}
	// progress[i]: every item of source i due at or before it is with the
	// sink; OnPage gets the least of them.
	progress := make([]int64, len(l.cfg.Sources))
	for i := range progress {
		progress[i] = from
	}
	report := func(i int, loadedTo int64) {
		progress[i] = max(progress[i], loadedTo)
		if l.cfg.OnSourcePage != nil {
			l.cfg.OnSourcePage(i, progress[i])
		}
		if l.cfg.OnPage != nil {
			l.cfg.OnPage(slices.Min(progress))
		}
	}
	for i, src := range l.cfg.Sources {
		// Up to the horizon: lower than target if MaxHeld stopped an
		// earlier source.
		until := min(target, l.Horizon())
		p := hourglass.PendingDueParams{After: start, AfterID: startID, Until: hourglass.FromUnixMilli(until), Parts: l.owned()}
		done, err := l.pages(ctx, src, p, func(t int64) { report(i, t) })
		if err != nil {
			// Lower the horizon back so the next load retries this range.
			l.mu.Lock()
			l.horizon = min(l.horizon, from, hourglass.UnixMilli(done))
			l.mu.Unlock()
			return err
		}
	}
	return nil
}

// LoadGained pages every pending item of the partitions gained since the
// last call, due up to the horizon (overdue ones first), into the sink: the
// window the previous owner held. On failure the partitions stay to load.
func (l *Loader) LoadGained(ctx context.Context) error {
	if l.cfg.Parts == nil {
		return nil
	}
	parts := l.cfg.Parts.TakeGained()
	if len(parts) == 0 {
		return nil
	}
	for _, src := range l.cfg.Sources {
		p := hourglass.PendingDueParams{Until: hourglass.FromUnixMilli(l.Horizon()), Parts: parts}
		if _, err := l.pages(ctx, src, p, nil); err != nil {
			l.cfg.Parts.Regain(parts)
			return err
		}
	}
	return nil
}

func (l *Loader) owned() hourglass.Parts {
	if l.cfg.Parts == nil {
		return nil
	}
	return l.cfg.Parts.Owned()
}

// pages hands the sink every item of src from p's cursor to p.Until, page
// by page; at MaxHeld it lowers the horizon to before the last item handed
// over and stops. It returns the cursor's time when it stopped (on error:
// everything before it was handed over).
func (l *Loader) pages(ctx context.Context, src Source, p hourglass.PendingDueParams, report func(loadedTo int64)) (time.Time, error) {
	for {
		p.Limit = l.cfg.PageSize
		if l.cfg.MaxHeld > 0 {
			l.mu.Lock()
			room := l.cfg.MaxHeld - l.cfg.Held()
			l.mu.Unlock()
			if room <= 0 {
				l.stopAt(p.After)
				return p.After, nil
			}
			p.Limit = min(p.Limit, room)
		}
		page, err := src(ctx, p)
		all := true
		if err == nil && len(page) > 0 {
			all, err = l.hand(ctx, page)
		}
		if err != nil {
			return p.After, err
		}
		if !all {
			return p.After, nil // stopped at MaxHeld: hand lowered the horizon
		}
		if len(page) < p.Limit {
			if report != nil {
				report(hourglass.UnixMilli(p.Until))
			}
			return p.Until, nil
		}
		last := page[len(page)-1]
		p.After, p.AfterID = last.At, last.ID
		if report != nil {
			// Every item due before the last one's millisecond is with
			// the sink now.
			report(hourglass.UnixMilli(last.At) - 1)
		}
	}
}

// stopAt lowers the horizon to just before at, after a load stopped at
// MaxHeld with every item due before at handed over (others due in its
// millisecond may not be).
func (l *Loader) stopAt(at time.Time) {
	l.mu.Lock()
	l.horizon = min(l.horizon, hourglass.UnixMilli(at)-1)
	l.truncated = true
	l.mu.Unlock()
}

// hand gives a loaded page (in due order) to the sink and reports whether
// it took all of it: with MaxHeld, it takes as much as there is room for at
// the moment of the hand-over and lowers the horizon to before the first
// item left.
func (l *Loader) hand(ctx context.Context, page []hourglass.DueItem) (bool, error) {
	if l.cfg.MaxHeld <= 0 {
		return true, l.cfg.Sink(ctx, page)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	all := true
	if room := max(l.cfg.MaxHeld-l.cfg.Held(), 0); room < len(page) {
		l.horizon = min(l.horizon, hourglass.UnixMilli(page[room].At)-1)
		l.truncated = true
		page, all = page[:room], false
	}
	if len(page) == 0 {
		return all, nil
	}
	return all, l.cfg.Sink(ctx, page)
}
