package writer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// Announcer is the optional interface of a Write that changes what is due
// (hourglass.DueUpdate): a create of a pending order, an arm or a cancel
// of a timer, a pay. Once the write committed (its Err is nil), Submit
// asks it what it changed and announces it to the store's due feed
// (WatchDue) before returning, so any writer of due items a store adds is
// followed by the engine as soon as its write says what it made due.
type Announcer interface {
	// Due adds to u what the committed write made due or no longer due.
	Due(u *hourglass.DueUpdate)
}

// feed fans the announcements of committed due items out to the store's
// subscribers (hourglass.DueFeed).
type feed struct {
	mu   sync.RWMutex
	subs map[*func(hourglass.DueUpdate)]struct{}
	any  atomic.Bool // len(subs) > 0, read without the lock
}

// Announce tells the store's due-feed subscribers u (nothing when u is
// empty). Writes that implement Announcer are announced by Submit; a
// store calls Announce itself for due items it commits outside the writer.
// It calls the subscribers on the caller's goroutine. Safe for concurrent
// use.
func (w *Writer[T]) Announce(u hourglass.DueUpdate) {
	if u.Empty() {
		return
	}
	w.feed.mu.RLock()
	defer w.feed.mu.RUnlock()
	for fn := range w.feed.subs {
		(*fn)(u)
	}
}

// announce announces what the committed writes among writes changed.
func (w *Writer[T]) announce(writes ...T) {
	if !w.feed.any.Load() {
		return // nobody follows the feed: nothing to build
	}
	var u hourglass.DueUpdate
	for _, wr := range writes {
		if a, ok := any(wr).(Announcer); ok && wr.Err() == nil {
			a.Due(&u)
		}
	}
	w.Announce(u)
}

// WatchDue implements hourglass.DueFeed for the store whose writer w is:
// fn is told what w's writes announce and, when remote is set (a shared
// store's hourglass.ClusterStore.WatchCreated), what the other processes
// committed. remote runs until ctx ends, restarted with capped backoff
// after a failure, which is logged and told to fn as Reload (as is remote's
// own nil, "reload").
func (w *Writer[T]) WatchDue(ctx context.Context, remote func(context.Context, func([]hourglass.DueItem)) error, fn func(hourglass.DueUpdate)) (wait func()) {
	sub := &fn
	w.feed.mu.Lock()
	if w.feed.subs == nil {
		w.feed.subs = map[*func(hourglass.DueUpdate)]struct{}{}
	}
	w.feed.subs[sub] = struct{}{}
	w.feed.any.Store(true)
	w.feed.mu.Unlock()
	var wg sync.WaitGroup
	if remote != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watchRemote(ctx, remote, fn)
		}()
	}
	// Unsubscribed under the write lock: once it is taken, no Announce is
	// calling fn.
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		w.feed.mu.Lock()
		delete(w.feed.subs, sub)
		w.feed.any.Store(len(w.feed.subs) > 0)
		w.feed.mu.Unlock()
	}()
	return wg.Wait
}

// watchRemote runs remote until ctx ends, again after a failure.
func (w *Writer[T]) watchRemote(ctx context.Context, remote func(context.Context, func([]hourglass.DueItem)) error, fn func(hourglass.DueUpdate)) {
	log := w.cfg.Log
	if log == nil {
		log = slog.Default()
	}
	sup := timing.Supervisor{
		Clock:   hourglass.WithTimers(w.cfg.Clock),
		Backoff: timing.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second},
		Failed: func(err error, retryIn time.Duration) {
			log.Warn(w.cfg.Name+": watch of other nodes' due items stopped; restarting it", "retry_in", retryIn, "err", err)
			fn(hourglass.DueUpdate{Reload: true})
		},
	}
	_ = sup.Run(ctx, func(ctx context.Context) error {
		err := remote(ctx, func(ts []hourglass.DueItem) {
			if ts == nil {
				fn(hourglass.DueUpdate{Reload: true})
				return
			}
			fn(hourglass.DueUpdate{Due: ts})
		})
		if err == nil && ctx.Err() == nil {
			err = errors.New("watch of other nodes' due items stopped")
		}
		return err
	})
}
