package source

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
)

// Bad rows: a pending row whose key or deadline cannot be read or lies out
// of range (hourglass.BadSourceRow) is skipped by every read, so it stops
// nothing; the runner looks for them every SweepInterval and reports each
// once: one WARN, hourglass_source_bad_rows_total{source,reason}, a place
// in the list the dashboard shows, and the source_bad_rows alert while one
// was found within badRowsRecent.
const (
	// BadRowsKept is how many of the latest bad rows a source keeps
	// (Runner.BadRowList); the dashboard shows the latest BadRowsShown.
	BadRowsKept  = 1000
	BadRowsShown = 100
	// badRowsRead bounds the bad rows read per look.
	badRowsRead = 1000
	// badRowsRemembered bounds the keys remembered as reported: beyond it
	// the oldest is forgotten (and reported again if still bad).
	badRowsRemembered = 10_000
	// badRowsRecent: the alert fires while a bad row was found within it.
	badRowsRecent = 10 * time.Minute
)

// badRows is what a source found. Safe for concurrent use.
type badRows struct {
	mu    sync.Mutex
	seen  map[string]bool          // the keys reported
	order []string                 // seen's keys, oldest first
	list  []hourglass.BadSourceRow // the latest BadRowsKept, oldest first
	total int64
	// lastAt is when a look last found one (zero: never).
	lastAt time.Time
}

// found records the rows of one look at now and returns those not
// reported before.
func (b *badRows) found(rows []hourglass.BadSourceRow, now time.Time) []hourglass.BadSourceRow {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(rows) > 0 {
		b.lastAt = now
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	var fresh []hourglass.BadSourceRow
	for _, r := range rows {
		if b.seen[r.Key] {
			continue
		}
		fresh = append(fresh, r)
		b.seen[r.Key] = true
		b.order = append(b.order, r.Key)
		if len(b.order) > badRowsRemembered {
			delete(b.seen, b.order[0])
			b.order = b.order[1:]
		}
		r.FoundAt = now
		b.list = append(b.list, r)
		if len(b.list) > BadRowsKept {
			b.list = b.list[1:]
		}
		b.total++
	}
	return fresh
}

// snapshot returns the total reported, the latest rows (newest first, up
// to limit) and
// whether one was found within badRowsRecent of now.
func (b *badRows) snapshot(now time.Time, limit int) (total int64, list []hourglass.BadSourceRow, recent bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	list = make([]hourglass.BadSourceRow, min(len(b.list), limit))
	for i := range list {
		list[i] = b.list[len(b.list)-1-i]
	}
	return b.total, list, !b.lastAt.IsZero() && now.Sub(b.lastAt) < badRowsRecent
}

// watchBad looks for bad rows at start and every SweepInterval.
func (s *runner) watchBad(ctx context.Context) {
	for {
		s.lookForBad(ctx)
		if timing.Sleep(ctx, s.clock, s.cfg.SweepInterval) != nil {
			return
		}
	}
}

// lookForBad reads the bad rows of this node's partitions and reports the
// new ones.
func (s *runner) lookForBad(ctx context.Context) {
	rows, err := s.table.BadRows(ctx, badRowsRead)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("source: look for rows with a bad key or deadline failed; retrying", "err", err)
		}
		return
	}
	mine := rows[:0]
	for _, r := range rows {
		if s.parts.Has(keyID(r.Key)) {
			mine = append(mine, r)
		}
	}
	for _, r := range s.bad.found(mine, s.clock.Now()) {
		s.cfg.Observer.SourceBadRows(s.src.Name, r.Reason, 1)
		s.log.Warn("source: skipping a pending row whose key or deadline hourglass cannot close by: fix the row (keys 1 to 2^63-2, deadlines 1970-01-01 to 9999-12-31 UTC)",
			"key", r.Key, "deadline", r.Deadline, "reason", r.Reason)
	}
}

// keyID is a key as text as the id its partition is read from: an
// unsigned one beyond int64 wraps, one that is no number is partition 0's.
func keyID(key string) int64 {
	if id, err := strconv.ParseInt(key, 10, 64); err == nil {
		return id
	}
	if u, err := strconv.ParseUint(key, 10, 64); err == nil {
		return int64(u)
	}
	return 0
}

// BadRows returns the sources that found a row with a bad key or deadline
// within the last 10 minutes, for the source_bad_rows alert.
func (r *Runner) BadRows(now time.Time) []string {
	var out []string
	for _, s := range r.srcs {
		if _, _, recent := s.bad.snapshot(now, 0); recent {
			out = append(out, s.src.Name)
		}
	}
	return out
}

// BadRowList returns the latest bad rows (up to BadRowsKept, newest
// first) of the source name, and how many it reported since start; ok is
// false when there is no such source. Safe for concurrent use.
func (r *Runner) BadRowList(name string) (rows []hourglass.BadSourceRow, total int64, ok bool) {
	for _, s := range r.srcs {
		if s.src.Name == name {
			total, rows, _ = s.bad.snapshot(time.Time{}, BadRowsKept)
			return rows, total, true
		}
	}
	return nil, 0, false
}
