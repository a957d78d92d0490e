package source

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
)

// latencySamples is how many of the latest closes' lateness a source keeps
// for its quantiles.
const latencySamples = 1024

// Stat is one source as this node has seen it since it started.
type Stat struct {
	Name                                    string
	Held                                    int
	Closes, Noops, GuardErrors, CloseErrors int64
	Swept                                   int64
	LatenessP50, LatenessP99                time.Duration
	Misconfigured                           bool
	// BadRows is how many rows with a bad key or deadline the source
	// reported; BadRowList the latest (newest first, up to BadRowsShown).
	BadRows    int64
	BadRowList []hourglass.BadSourceRow
}

// stats are a source's counts and its latest closes' lateness.
type stats struct {
	closes, noops, guardErrors, closeErrors, swept atomic.Int64

	mu   sync.Mutex
	late []time.Duration // a ring of the latest latencySamples
	next int
}

func (s *stats) closed(d time.Duration) {
	s.closes.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.late) < latencySamples {
		s.late = append(s.late, d)
		return
	}
	s.late[s.next] = d
	s.next = (s.next + 1) % latencySamples
}

// quantiles returns the p50 and p99 of the kept lateness (0 when none).
func (s *stats) quantiles() (p50, p99 time.Duration) {
	s.mu.Lock()
	l := slices.Clone(s.late)
	s.mu.Unlock()
	if len(l) == 0 {
		return 0, 0
	}
	slices.Sort(l)
	at := func(q float64) time.Duration { return l[min(int(q*float64(len(l))), len(l)-1)] }
	return at(0.5), at(0.99)
}

// Stats returns every source's counts, in the file's order.
func (r *Runner) Stats(now time.Time) []Stat {
	bad := r.Misconfigured(now)
	out := make([]Stat, len(r.srcs))
	for i, s := range r.srcs {
		p50, p99 := s.stats.quantiles()
		out[i] = Stat{
			Name: s.src.Name, Held: s.sched.Pending() + s.sched.Queued(),
			Closes: s.stats.closes.Load(), Noops: s.stats.noops.Load(), GuardErrors: s.stats.guardErrors.Load(),
			CloseErrors: s.stats.closeErrors.Load(), Swept: s.stats.swept.Load(),
			LatenessP50: p50, LatenessP99: p99, Misconfigured: slices.Contains(bad, s.src.Name),
		}
		out[i].BadRows, out[i].BadRowList, _ = s.bad.snapshot(now, BadRowsShown)
	}
	return out
}
