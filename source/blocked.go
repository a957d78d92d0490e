package source

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Retries of a row another transaction holds locked (SourceBlocked): the
// first after blockedRetryMin, doubling while it stays blocked, at most
// blockedRetryMax apart. A shop's transaction holds a row for
// milliseconds; one that holds it longer delays that row alone.
const (
	blockedRetryMin = 20 * time.Millisecond
	blockedRetryMax = 500 * time.Millisecond
	// BlockedAlertDefault is Config.BlockedAlert's default.
	BlockedAlertDefault = 10 * time.Second
	// blockedForget: a blocked row not seen again for this long (its
	// partition moved, the sweeper will find it) is forgotten.
	blockedForget = time.Minute
)

// blockedRows are the rows of a source whose last close met a lock, by
// key. Safe for concurrent use.
type blockedRows struct {
	mu sync.Mutex
	m  map[int64]*blockedRow
}

type blockedRow struct {
	since, last time.Time
	waits       int
	reported    bool // logged at ERROR past the alert bound
}

// has reports whether key's last close met a lock.
func (b *blockedRows) has(key int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[key]
	return ok
}

// wait records that key's close met a lock at now; it returns when the
// row was first blocked, when to try it again, and whether it has just
// passed bound (to report once).
func (b *blockedRows) wait(key int64, now time.Time, bound time.Duration) (since, retryAt time.Time, overdue bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[int64]*blockedRow{}
	}
	r, ok := b.m[key]
	if !ok {
		r = &blockedRow{since: now}
		b.m[key] = r
	}
	r.last = now
	r.waits++
	if !r.reported && now.Sub(r.since) >= bound {
		r.reported, overdue = true, true
	}
	wait := blockedRetryMax
	if r.waits < 8 {
		wait = min(blockedRetryMin<<(r.waits-1), blockedRetryMax)
	}
	return r.since, now.Add(wait), overdue
}

// done forgets key (closed, or found paid); it returns how long it was
// blocked and whether it had been reported (zero, false: it was not
// blocked).
func (b *blockedRows) done(key int64, now time.Time) (blocked time.Duration, reported bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.m[key]
	if !ok {
		return 0, false
	}
	delete(b.m, key)
	return now.Sub(r.since), r.reported
}

// over returns the rows blocked for bound or longer at now, longest
// first, as "key K for D", and forgets those not seen for blockedForget.
func (b *blockedRows) over(now time.Time, bound time.Duration) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	type row struct {
		key  int64
		for_ time.Duration
	}
	var rows []row
	for k, r := range b.m {
		if now.Sub(r.last) > blockedForget {
			delete(b.m, k)
			continue
		}
		if d := now.Sub(r.since); d >= bound {
			rows = append(rows, row{k, d})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].for_ > rows[j].for_ })
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprintf("key %d for %s", r.key, r.for_.Round(time.Second))
	}
	return out
}

// Blocked returns, for the source_row_blocked alert, each row that a
// transaction of the shop has kept from closing for Config.BlockedAlert
// or longer, as "source S key K for D", longest first within a source.
// Safe for concurrent use.
func (r *Runner) Blocked(now time.Time) []string {
	var out []string
	for _, s := range r.srcs {
		for _, row := range s.blocked.over(now, r.cfg.BlockedAlert) {
			out = append(out, "source "+s.src.Name+" "+row)
		}
	}
	return out
}
