package wheel

import (
	"fmt"
	"math/bits"
)

// checkInvariants verifies every structural invariant of w, returning the
// first violation. It walks the whole wheel, so tests call it on small
// wheels or at intervals.
func (w *Wheel) checkInvariants() error {
	now := w.Now()
	seen := make(map[int32]bool)
	for list := range numLists {
		prev := ^int32(list)
		n := 0
		for i := w.heads[list]; i != none; i = w.entries[i].next {
			if seen[i] {
				return fmt.Errorf("entry %d linked twice (list %d)", i, list)
			}
			seen[i] = true
			e := w.entries[i]
			if e.prev != prev {
				return fmt.Errorf("list %d: entry %d prev=%d, want %d", list, i, e.prev, prev)
			}
			prev = i
			n++
			switch {
			case list < numSlots:
				if e.deadline <= now {
					return fmt.Errorf("slot list %d holds id %d due at %d <= now %d", list, e.id, e.deadline, now)
				}
				t := w.tickAt(e.deadline)
				diff := (t ^ w.tick) | slotMask
				level := (bits.Len64(diff) - 1) / bitsPerLevel
				slot := int(t>>(level*bitsPerLevel)) & slotMask
				if diff>>horizonBits != 0 || level*slotsPerLevel+slot != list {
					return fmt.Errorf("id %d (deadline %d, now %d) in list %d, want level %d slot %d", e.id, e.deadline, now, list, level, slot)
				}
			case list == overflowList:
				t := w.tickAt(e.deadline)
				if e.deadline <= now || (t^w.tick)>>horizonBits == 0 {
					return fmt.Errorf("overflow list holds id %d (deadline %d, now %d) that fits the levels", e.id, e.deadline, now)
				}
				if t < w.overflowMin {
					return fmt.Errorf("overflowMin %d above deadline tick %d", w.overflowMin, t)
				}
			default: // due or firing
				if e.deadline > now {
					return fmt.Errorf("list %d holds id %d due at %d > now %d", list, e.id, e.deadline, now)
				}
				if e.deadline < w.overdueMin {
					return fmt.Errorf("overdueMin %d above deadline %d", w.overdueMin, e.deadline)
				}
			}
		}
		if list < numSlots {
			bit := w.occupied[list/slotsPerLevel]>>(list%slotsPerLevel)&1 == 1
			if bit != (n > 0) {
				return fmt.Errorf("slot list %d has %d entries but occupied bit %v", list, n, bit)
			}
		}
	}
	if w.heads[firingList] != none && !w.advancing {
		return fmt.Errorf("firing list not empty outside Advance")
	}
	if len(seen) != w.count {
		return fmt.Errorf("%d entries linked, count %d", len(seen), w.count)
	}
	free := 0
	for i := w.free; i != none; i = w.entries[i].next {
		if seen[i] {
			return fmt.Errorf("entry %d both free and linked", i)
		}
		free++
	}
	if free+w.count != len(w.entries) {
		return fmt.Errorf("%d free + %d live != %d entries", free, w.count, len(w.entries))
	}

	// The index: exactly the linked entries, each reachable from its home.
	if w.count > 0 && w.count*maxLoadDen > len(w.table)*maxLoadNum {
		return fmt.Errorf("load factor %d/%d above limit", w.count, len(w.table))
	}
	cells := 0
	mask := len(w.table) - 1
	for p, i := range w.table {
		if i == none {
			continue
		}
		cells++
		if !seen[i] {
			return fmt.Errorf("index cell %d points at unlinked entry %d", p, i)
		}
		for q := home(w.entries[i].id, mask); q != p; q = (q + 1) & mask {
			if w.table[q] == none {
				return fmt.Errorf("id %d at cell %d unreachable: cell %d empty", w.entries[i].id, p, q)
			}
		}
	}
	if cells != w.count {
		return fmt.Errorf("%d index cells, count %d", cells, w.count)
	}
	return nil
}
