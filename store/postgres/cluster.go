package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
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
// notifications.
//
// A notice is only a hint. NOTIFY needs no privilege: any role that can
// connect to the database can send one on these channels. So the listener
// (listenOnce) takes only the ids of a payload (the deadlines are for
// nodes of earlier versions, which read them) and hands them to every
// watch of the store value but the one that wrote them; each watch reads
// the ids' deadlines from the database (dueByID), all the ids gathered
// since its last read in one statement per dueByIDBatch, at most once per
// hintEvery. A forged id reads nothing, or the deadline the database
// holds: no notice can move one. What a flood of forged notices costs is
// bounded: createdIDsMax ids held per watch (past it, one reload of the
// window, at most once per reloadEvery), one read per hintEvery, and an
// unreadable notice is counted (Config.ObserveNoticeRejected) and logged
// at most once per rejectLogEvery.

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

// parseCreated returns the origin and ids of a payload of createdPayloads.
// Every entry must be id:deadline, both decimal, the id positive: anything
// else is not hourglass's.
func parseCreated(payload string) (string, []int64, error) {
	origin, list, ok := strings.Cut(payload, "|")
	if !ok || origin == "" {
		return "", nil, errors.New("no origin")
	}
	out := make([]int64, 0, strings.Count(list, ",")+1)
	for entry := range strings.SplitSeq(list, ",") {
		idText, deadlineText, ok := strings.Cut(entry, ":")
		if !ok {
			return origin, nil, fmt.Errorf("entry %.40q is not id:deadline", entry)
		}
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil || id <= 0 {
			return origin, nil, fmt.Errorf("entry %.40q: the id is not a positive integer", entry)
		}
		if _, err := strconv.ParseInt(deadlineText, 10, 64); err != nil {
			return origin, nil, fmt.Errorf("entry %.40q: the deadline is not an integer", entry)
		}
		out = append(out, id)
	}
	return origin, out, nil
}

// Bounds of what the created-orders channel's notices may cost a watch.
const (
	// createdIDsMax bounds the ids waiting for one watch's next read:
	// past it (notices faster than the reads), they are dropped and the
	// watch reloads instead.
	createdIDsMax = 50_000
	// dueByIDBatch is the most ids one statement of dueByID reads.
	dueByIDBatch = 5_000
	// reloadEvery spaces a watch's reloads (a reload reads the whole
	// window): the first at once, the next no sooner than this after it.
	reloadEvery = time.Second
)

// createdWatch is one WatchCreated call's queue between the listener and
// its fn: a set of ids, coalesced until the watch reads them.
type createdWatch struct {
	mu     sync.Mutex
	ids    map[int64]struct{}
	reload bool
	wake   chan struct{} // a token when ids or reload are pending
}

func (w *createdWatch) push(ids []int64, reload bool) {
	w.mu.Lock()
	switch {
	case reload || (!w.reload && len(w.ids)+len(ids) > createdIDsMax):
		// The reload covers what is pending: it reads the database after
		// these orders committed.
		w.reload, w.ids = true, nil
	case w.reload:
		// A reload is pending: it covers these too.
	default:
		if w.ids == nil {
			w.ids = make(map[int64]struct{}, len(ids))
		}
		for _, id := range ids {
			w.ids[id] = struct{}{}
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *createdWatch) take() (reload bool, ids []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reload = w.reload
	ids = make([]int64, 0, len(w.ids))
	for id := range w.ids {
		ids = append(ids, id)
	}
	w.reload, w.ids = false, nil
	return reload, ids
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

// push hands ids, or a reload, to every watch; it never blocks on one.
func (ws *watchers) push(ids []int64, reload bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.set {
		w.push(ids, reload)
	}
}

func (ws *watchers) empty() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.set) == 0
}

// onCreated handles a notification on the created channel: its ids, to
// be read by the watches. An unreadable one is rejected (counted).
func (s *Store) onCreated(payload string) {
	origin, ids, err := parseCreated(payload)
	if err != nil {
		s.rejected.add("created", err)
		return
	}
	if origin == s.origin || s.watches.empty() {
		return // this store value's own creates, or nobody watches
	}
	s.watches.push(ids, false)
}

// dueByIDSQL reads the deadlines of the pending orders ($1), the fire
// times of the scheduled timers ($2) and the reminders of pending orders
// ($3, order ids; answered as reminder ids) among the ids a notice named:
// primary-key look-ups.
const dueByIDSQL = `SELECT id, deadline FROM orders WHERE id = ANY($1) AND status = 'pending_payment'
UNION ALL SELECT id, fire_at FROM timers WHERE id = ANY($2) AND status = 'scheduled'
UNION ALL SELECT id + $4, remind_at FROM orders WHERE id = ANY($3) AND status = 'pending_payment' AND remind_at IS NOT NULL`

// dueByID returns the due items among ids as the database holds them, in
// statements of at most dueByIDBatch ids.
func (s *Store) dueByID(ctx context.Context, ids []int64) ([]hourglass.DueItem, error) {
	var out []hourglass.DueItem
	for chunk := range slices.Chunk(ids, dueByIDBatch) {
		var orders, timers, reminders []int64
		for _, id := range chunk {
			switch hourglass.DueKindOf(id) {
			case hourglass.DueTimer:
				timers = append(timers, id)
			case hourglass.DueReminder:
				reminders = append(reminders, hourglass.ReminderOrderID(id))
			default:
				orders = append(orders, id)
			}
		}
		rows, err := s.pool.Query(ctx, dueByIDSQL, orders, timers, reminders, hourglass.ReminderIDBase)
		if err != nil {
			return nil, fmt.Errorf("postgres: read the announced orders' deadlines: %w", err)
		}
		var id, at int64
		_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
			out = append(out, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(at)})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("postgres: read the announced orders' deadlines: %w", err)
		}
	}
	return out, nil
}

// WatchCreated implements hourglass.ClusterStore. It calls fn(nil) first
// (orders created before the watch began are not reported: load them
// after this call), then with the timers of the orders that other store
// values, in this process or others, commit on the same database and
// schema, soon after each commit (within hintEvery), as the database holds
// them when read (a notice is only a hint: see above); and fn(nil) again
// after the listening connection reconnects, or after more than
// createdIDsMax ids piled up between two reads (at most once per
// reloadEvery). fn is called from the caller's goroutine, never
// concurrently; several watches may run on one store value, each is told
// everything. It returns nil when ctx ends, an unavailable error when
// the store is closed, or the error of a failed read.
func (s *Store) WatchCreated(ctx context.Context, fn func([]hourglass.DueItem)) error {
	w := &createdWatch{wake: make(chan struct{}, 1)}
	s.watches.add(w)
	defer s.watches.remove(w)
	// Registered before the first fn(nil): whatever commits after the
	// reload begins is either in it or reported.
	w.push(nil, true)
	clock := hourglass.WithTimers(hourglass.SystemClock{}) // real time, like the listener
	var lastReload time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closed:
			return errClosed
		case <-w.wake:
		}
		round := clock.Now()
		reload, ids := w.take()
		if reload {
			if wait := lastReload.Add(reloadEvery).Sub(round); wait > 0 && timing.Sleep(ctx, clock, wait) != nil {
				return nil
			}
			lastReload = clock.Now()
			fn(nil)
		}
		if len(ids) > 0 {
			ts, err := s.dueByID(ctx, ids)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err // restarted with a reload (writer.WatchDue)
			}
			if len(ts) > 0 {
				fn(ts)
			}
		}
		// The ids of the notices arriving meanwhile wait for one read.
		if wait := round.Add(hintEvery).Sub(clock.Now()); wait > 0 && timing.Sleep(ctx, clock, wait) != nil {
			return nil
		}
	}
}

var _ hourglass.DueFeed = (*Store)(nil)

// WatchDue implements hourglass.DueFeed: the due items this store value's
// writes commit, and those of the other processes (WatchCreated).
func (s *Store) WatchDue(ctx context.Context, fn func(hourglass.DueUpdate)) (wait func()) {
	return s.w.WatchDue(ctx, s.WatchCreated, fn)
}
