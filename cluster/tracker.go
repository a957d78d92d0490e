package cluster

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hourglass/hourglass"
)

// Ownership is the set of partitions a node owns (Membership).
type Ownership interface {
	// Owned returns the partitions owned now.
	Owned() hourglass.Parts
	// OnChange registers fn, called (without blocking) after each change.
	OnChange(fn func(gained, lost []int))
}

// Tracker follows an Ownership for one component that works partitions
// (the engine, webhook delivery): the partitions owned now, with an O(1)
// test for the hot paths, and those gained and not yet loaded. Its methods
// are safe for concurrent use.
type Tracker struct {
	all    bool                            // no Ownership: every partition, always
	parts  atomic.Pointer[hourglass.Parts] // nil: every partition
	mask   atomic.Int64
	onGain func()

	mu     sync.Mutex
	gained map[int]bool
}

// Track returns a tracker of o, which calls onGain (it must not block)
// whenever partitions are gained, or marked to be loaded again (GainAll). A
// nil o owns every partition and never gains any.
func Track(o Ownership, onGain func()) *Tracker {
	t := &Tracker{onGain: onGain, gained: map[int]bool{}}
	t.mask.Store(hourglass.Parts(nil).Mask())
	if o == nil {
		t.all = true
		return t
	}
	t.set(o.Owned())
	o.OnChange(func(gained, _ []int) {
		t.set(o.Owned())
		t.gain(gained)
	})
	return t
}

func (t *Tracker) set(owned hourglass.Parts) {
	t.parts.Store(&owned)
	t.mask.Store(owned.Mask())
}

// Owned returns the partitions owned now (nil: every partition), as a
// store scan's filter.
func (t *Tracker) Owned() hourglass.Parts {
	if p := t.parts.Load(); p != nil {
		return *p
	}
	return nil
}

// Has reports whether the partition of an order id is owned now.
func (t *Tracker) Has(orderID int64) bool {
	if t.all {
		return true
	}
	return t.mask.Load()>>hourglass.PartitionOf(orderID)&1 == 1
}

// GainAll marks every owned partition to be loaded again (what announced
// it may have missed some).
func (t *Tracker) GainAll() {
	all := make([]int, hourglass.Partitions)
	for i := range all {
		all[i] = i
	}
	t.gain(all)
}

func (t *Tracker) gain(parts []int) {
	if len(parts) == 0 {
		return
	}
	t.mu.Lock()
	for _, p := range parts {
		t.gained[p] = true
	}
	t.mu.Unlock()
	if t.onGain != nil {
		t.onGain()
	}
}

// TakeGained returns, ascending, the partitions gained since the last call
// that are still owned, and forgets them; after a failed load, Regain puts
// them back.
func (t *Tracker) TakeGained() hourglass.Parts {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out hourglass.Parts
	for p := range t.gained {
		if t.mask.Load()>>p&1 == 1 {
			out = append(out, p)
		}
	}
	clear(t.gained)
	slices.Sort(out)
	return out
}

// Regain marks partitions to be loaded again (their load failed), without
// calling onGain: the caller retries.
func (t *Tracker) Regain(parts hourglass.Parts) {
	t.mu.Lock()
	for _, p := range parts {
		t.gained[p] = true
	}
	t.mu.Unlock()
}
