package hourglasstest

import (
	"slices"
	"sync"

	"github.com/hourglass/hourglass"
)

// Ownership is a node's partition set that a test moves by hand, as
// cluster.Membership moves it when leases are taken and lost; it
// implements cluster.Ownership. It is safe for concurrent use.
type Ownership struct {
	mu    sync.Mutex
	parts hourglass.Parts
	fns   []func(gained, lost []int)
}

// NewOwnership returns a set owning parts.
func NewOwnership(parts ...int) *Ownership {
	return &Ownership{parts: slices.Sorted(slices.Values(parts))}
}

// Owned returns the partitions owned now, ascending.
func (o *Ownership) Owned() hourglass.Parts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append(hourglass.Parts{}, o.parts...)
}

// OnChange registers fn, called by Move.
func (o *Ownership) OnChange(fn func(gained, lost []int)) {
	o.mu.Lock()
	o.fns = append(o.fns, fn)
	o.mu.Unlock()
}

// Move gains and loses partitions, then tells every registered fn.
func (o *Ownership) Move(gained, lost []int) {
	o.mu.Lock()
	o.parts = slices.DeleteFunc(append(o.parts, gained...), func(p int) bool { return slices.Contains(lost, p) })
	slices.Sort(o.parts)
	fns := slices.Clone(o.fns)
	o.mu.Unlock()
	for _, fn := range fns {
		fn(gained, lost)
	}
}
