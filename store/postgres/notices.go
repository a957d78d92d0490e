package postgres

import (
	"log/slog"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// What a node hears on its NOTIFY channels is only a hint to read the
// database (cluster.go says why: any role that can connect can NOTIFY).
// A hint wakes a reader at most once per hintEvery, and a notice that is
// not hourglass's is counted and ignored, logged at most once per
// rejectLogEvery, so a flood of forged notices costs bounded memory,
// reads and log lines.

const (
	// hintEvery spaces the wake-ups a channel's notices cause: the first
	// at once, the notices within hintEvery after it one wake-up at its
	// end. It is the most a notice of another node waits under a flood.
	hintEvery = 20 * time.Millisecond
	// rejectLogEvery spaces the log lines about rejected notices.
	rejectLogEvery = time.Minute
)

// hint calls wake at most once per hintEvery, however often notify is
// called: none is lost, a burst becomes one call at the end of the
// interval. Safe for concurrent use.
type hint struct {
	wake  func()
	clock hourglass.TimerClock

	mu      sync.Mutex
	last    time.Time
	pending bool // a call is armed for the end of the interval
}

func newHint(clock hourglass.TimerClock, wake func()) *hint {
	return &hint{wake: wake, clock: clock}
}

func (h *hint) notify() {
	h.mu.Lock()
	if h.pending {
		h.mu.Unlock()
		return // the armed call covers this notice
	}
	now := h.clock.Now()
	if wait := h.last.Add(hintEvery).Sub(now); wait > 0 {
		h.pending = true
		h.mu.Unlock()
		h.clock.AfterFunc(wait, func() {
			h.mu.Lock()
			h.pending, h.last = false, h.clock.Now()
			h.mu.Unlock()
			h.wake()
		})
		return
	}
	h.last = now
	h.mu.Unlock()
	h.wake()
}

// rejects counts the notices on hourglass's channels that are not
// hourglass's (Config.ObserveNoticeRejected) and logs them: the first at
// once, then at most one line per rejectLogEvery with the count since.
// Safe for concurrent use.
type rejects struct {
	log     *slog.Logger
	clock   hourglass.Clock
	observe func(channel string)

	mu        sync.Mutex
	logged    time.Time // when the last line was written
	since     int64     // rejected since then
	lastCause error
}

func (r *rejects) add(channel string, cause error) {
	if r.observe != nil {
		r.observe(channel)
	}
	now := r.clock.Now()
	r.mu.Lock()
	r.since++
	r.lastCause = cause
	if !r.logged.IsZero() && now.Sub(r.logged) < rejectLogEvery {
		r.mu.Unlock()
		return
	}
	n, c := r.since, r.lastCause
	r.since, r.logged = 0, now
	r.mu.Unlock()
	r.log.Warn("postgres: ignored notices on hourglass's NOTIFY channels that hourglass did not send (any role that can connect can NOTIFY; see docs/security.md); counted in hourglass_notices_rejected_total, logged at most once a minute",
		"notices", n, "channel", channel, "last", c)
}

// Channels returns the NOTIFY channels the store listens on: deliveries,
// created orders, timer requests. They are derived from the database's
// and schema's names, so anyone who knows those knows them; a notice on
// them is only a hint (see cluster.go). Safe for concurrent use.
func (s *Store) Channels() []string {
	return []string{s.channel, s.createdChannel, s.requestsChannel}
}
