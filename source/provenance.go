package source

import (
	"slices"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// maxMarked bounds the rows the sweeper or a payment check marked with
// their cause, until their close: past it a row's close records the cause
// its deadline gives (deadline, recovery or takeover) instead.
const maxMarked = 100000

// causes tells what closes a row (hourglass.Closer), as the engine does
// for orders: the payment check's answer, else the sweeper, else start-up
// recovery (due before the runner started), else a takeover (due before
// this node gained its partition), else its deadline. Safe for concurrent
// use.
type causes struct {
	mu sync.Mutex
	// started is when the runner started, or, in a cluster, first owned
	// a partition: a row due before it waited for this node to start.
	started   time.Time
	everOwned bool
	owned     hourglass.Parts // as last seen (nil: every partition)
	gained    [hourglass.Partitions]time.Time
	marked    map[int64]hourglass.CloseCause // by the sweeper or a check, until closed
}

func newCauses(started time.Time, owned hourglass.Parts) *causes {
	return &causes{started: started, everOwned: owned == nil || len(owned) > 0, owned: slices.Clone(owned), marked: map[int64]hourglass.CloseCause{}}
}

// own records the partitions owned from now: those not owned before were
// gained at now, but the first a node owns are its start, not a takeover.
func (c *causes) own(owned hourglass.Parts, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.everOwned && len(owned) > 0 {
		c.everOwned, c.started, c.owned = true, now, slices.Clone(owned)
		return
	}
	for _, p := range owned {
		if c.owned != nil && !slices.Contains(c.owned, p) {
			c.gained[p] = now
		}
	}
	c.owned = slices.Clone(owned)
}

// mark records why a row is handed to the close path (the sweeper, a
// check's answer); a later mark replaces it.
func (c *causes) mark(key int64, cause hourglass.CloseCause) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.marked[key]; ok || len(c.marked) < maxMarked {
		c.marked[key] = cause
	}
}

// of is the cause a close of r records now.
func (c *causes) of(r hourglass.DueItem) hourglass.CloseCause {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.marked[r.ID] != "":
		return c.marked[r.ID]
	case r.At.Before(c.started):
		return hourglass.CauseRecovery
	case r.At.Before(c.gained[hourglass.PartitionOf(r.ID)]):
		return hourglass.CauseTakeover
	}
	return hourglass.CauseDeadline
}

// done forgets the marks of rows whose close is settled (closed, or found
// not pending).
func (c *causes) done(key int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.marked, key)
}

// byCause splits rows by the cause their close records, in a stable
// order (the first row's cause first).
func (c *causes) byCause(rows []hourglass.DueItem) (order []hourglass.CloseCause, groups map[hourglass.CloseCause][]hourglass.DueItem) {
	groups = map[hourglass.CloseCause][]hourglass.DueItem{}
	for _, r := range rows {
		cause := c.of(r)
		if _, ok := groups[cause]; !ok {
			order = append(order, cause)
		}
		groups[cause] = append(groups[cause], r)
	}
	return order, groups
}
