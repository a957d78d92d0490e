package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/hourglass/hourglass"
)

// The cluster's membership and lease SQL is package sqlq's (sqlq.Cluster,
// embedded in Store): the cluster tables are migration 0002's.

var _ hourglass.ClusterStore = (*Store)(nil)

// Created orders reach other processes by NOTIFY, sent by the group-commit
// writer in the transaction of each batch that created orders (so only
// committed orders are announced, at their commit; see eventsSQL) on the
// store's created-orders channel (Store.createdChannel). A payload is
//
//	<origin>|<id>:<deadline ms>,<id>:<deadline ms>,…
//
// in decimal, where origin names the store value that wrote it; a batch
// whose list is longer than createdPayloadMax bytes is sent as several
// notifications. The listener (listenOnce) hands them to every watch of the
// store value but the one that wrote them.

// createdPayloadMax bounds a notification's payload: PostgreSQL refuses
// 8000 bytes or more.
const createdPayloadMax = 7900

// createdPayloads returns the payloads announcing orders (ids and deadlines
// in unix ms) created by origin, each at most createdPayloadMax bytes.
func createdPayloads(origin string, ids, deadlines []int64) []string {
	var (
		out []string
		b   []byte
	)
	for i, id := range ids {
		start := len(b)
		if len(b) == 0 {
			b = append(append(b, origin...), '|')
		} else {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, deadlines[i], 10)
		if len(b) > createdPayloadMax && start > len(origin)+1 {
			// Too long with this entry: send the rest without it and
			// start the next payload with it.
			entry := b[start+1:]
			out = append(out, string(b[:start]))
			b = append(append(append([]byte(nil), origin...), '|'), entry...)
		}
	}
	if len(b) > 0 {
		out = append(out, string(b))
	}
	return out
}

// parseCreated returns the origin and timers of a payload of createdPayloads.
func parseCreated(payload string) (string, []hourglass.DueItem, error) {
	origin, list, ok := strings.Cut(payload, "|")
	if !ok {
		return "", nil, errors.New("no origin")
	}
	out := make([]hourglass.DueItem, 0, strings.Count(list, ",")+1)
	for entry := range strings.SplitSeq(list, ",") {
		idText, deadlineText, ok := strings.Cut(entry, ":")
		if !ok {
			return origin, nil, fmt.Errorf("entry %q is not id:deadline", entry)
		}
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil {
			return origin, nil, fmt.Errorf("entry %q: %w", entry, err)
		}
		deadline, err := strconv.ParseInt(deadlineText, 10, 64)
		if err != nil {
			return origin, nil, fmt.Errorf("entry %q: %w", entry, err)
		}
		out = append(out, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(deadline)})
	}
	return origin, out, nil
}

// watchBufferMax bounds the timers waiting for one watch's fn: past it
// (fn slower than the creates of the other processes), they are dropped
// and fn is told to reload instead.
const watchBufferMax = 100_000

// createdWatch is one WatchCreated call's queue between the listener and
// its fn.
type createdWatch struct {
	mu     sync.Mutex
	timers []hourglass.DueItem
	reload bool
	wake   chan struct{} // a token when timers or reload are pending
}

func (w *createdWatch) push(ts []hourglass.DueItem, reload bool) {
	w.mu.Lock()
	switch {
	case reload || len(w.timers)+len(ts) > watchBufferMax:
		// The reload covers what is pending: it reads the database after
		// these orders committed.
		w.reload, w.timers = true, nil
	default:
		w.timers = append(w.timers, ts...)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *createdWatch) take() (reload bool, ts []hourglass.DueItem) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reload, ts = w.reload, w.timers
	w.reload, w.timers = false, nil
	return reload, ts
}

// watchers is the set of a store value's running watches. Its zero value
// is ready to use; safe for concurrent use.
type watchers struct {
	mu  sync.Mutex
	set map[*createdWatch]struct{}
}

func (ws *watchers) add(w *createdWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.set == nil {
		ws.set = make(map[*createdWatch]struct{})
	}
	ws.set[w] = struct{}{}
}

func (ws *watchers) remove(w *createdWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.set, w)
}

// push hands timers, or a reload, to every watch; it never blocks on one.
func (ws *watchers) push(ts []hourglass.DueItem, reload bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.set {
		w.push(ts, reload)
	}
}

func (ws *watchers) empty() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.set) == 0
}

// onCreated handles a notification on the created channel.
func (s *Store) onCreated(payload string) {
	if s.watches.empty() {
		return
	}
	origin, ts, err := parseCreated(payload)
	if origin == s.origin {
		return // this store value's own creates
	}
	if err != nil {
		s.log.Warn("postgres: an unreadable created-orders notification; the watches reload", "err", err)
		s.watches.push(nil, true)
		return
	}
	s.watches.push(ts, false)
}

// WatchCreated implements hourglass.ClusterStore. It calls fn(nil) first
// (orders created before the watch began are not reported: load them
// after this call), then with the timers of the orders that other store
// values, in this process or others, commit on the same database and
// schema, soon after each commit; and fn(nil) again after the listening
// connection reconnects, or after more than watchBufferMax timers piled up
// behind a slow fn. fn is called from the caller's goroutine, never
// concurrently; several watches may run on one store value, each is told
// everything. It returns nil when ctx ends, or an unavailable error when
// the store is closed.
func (s *Store) WatchCreated(ctx context.Context, fn func([]hourglass.DueItem)) error {
	w := &createdWatch{wake: make(chan struct{}, 1)}
	s.watches.add(w)
	defer s.watches.remove(w)
	// Registered before the first fn(nil): whatever commits after the
	// reload begins is either in it or reported.
	w.push(nil, true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closed:
			return errClosed
		case <-w.wake:
		}
		reload, ts := w.take()
		if reload {
			fn(nil)
		}
		if len(ts) > 0 {
			fn(ts)
		}
	}
}

var _ hourglass.DueFeed = (*Store)(nil)

// WatchDue implements hourglass.DueFeed: the due items this store value's
// writes commit, and those of the other processes (WatchCreated).
func (s *Store) WatchDue(ctx context.Context, fn func(hourglass.DueUpdate)) (wait func()) {
	return s.w.WatchDue(ctx, s.WatchCreated, fn)
}
