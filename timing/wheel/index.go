package wheel

// The id index: a table of entry indices keyed by entries[i].id, with open
// addressing and linear probing. Storing int32 indices instead of (id,
// index) pairs keeps it at 4 bytes a cell; the price is one load from the
// slab per probe, which linear probing at a load factor of at most 0.7
// keeps short (about 1.5 probes for a hit on average).

const (
	// The table grows (doubles) before the load factor would exceed
	// maxLoadNum/maxLoadDen. After growing it is at least 0.35 full, so the
	// table costs between 5.7 and 11.4 bytes per timer.
	maxLoadNum = 7
	maxLoadDen = 10

	minTableLen = 16
)

// mix is the splitmix64 finalizer: it spreads sequential ids (the common
// case for order ids) evenly over the table.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// home returns the cell where the probe for id starts in a table whose
// length is mask+1.
func home(id uint64, mask int) int {
	return int(mix(id) & uint64(mask))
}

// lookup returns the cell holding id's entry and true, or, if id is absent,
// the empty cell where it would be inserted and false. An empty (zero
// length) table returns 0, false.
func (w *Wheel) lookup(id uint64) (int, bool) {
	if len(w.table) == 0 {
		return 0, false
	}
	mask := len(w.table) - 1
	for p := home(id, mask); ; p = (p + 1) & mask {
		i := w.table[p]
		if i == none {
			return p, false
		}
		if w.entries[i].id == id {
			return p, true
		}
	}
}

// cellOf returns the cell holding entry i, which must be indexed. It
// compares cell contents with i rather than ids with entries[i].id, so it
// reads no other entry: fewer cache misses than lookup on a large wheel.
func (w *Wheel) cellOf(i int32) int {
	mask := len(w.table) - 1
	p := home(w.entries[i].id, mask)
	for w.table[p] != i {
		p = (p + 1) & mask
	}
	return p
}

// deleteCell empties cell p by backward shift: each later entry of the probe
// run that may legally sit at the hole (its home is not after the hole,
// cyclically) moves into it, and the hole moves to where it was. This keeps
// every entry reachable from its home without tombstones, so lookups never
// slow down after many deletions.
func (w *Wheel) deleteCell(p int) {
	t := w.table
	mask := len(t) - 1
	t[p] = none
	for q := (p + 1) & mask; t[q] != none; q = (q + 1) & mask {
		h := home(w.entries[t[q]].id, mask)
		// The entry at q is (q-h) cells past its home and the hole is
		// (q-p) cells back; it may fill the hole iff the hole is not
		// before its home.
		if (q-h)&mask >= (q-p)&mask {
			t[p] = t[q]
			t[q] = none
			p = q
		}
	}
}

// growTable doubles the table (or creates it) and reinserts every entry.
func (w *Wheel) growTable() {
	old := w.table
	t := make([]int32, max(2*len(old), minTableLen))
	for p := range t {
		t[p] = none
	}
	mask := len(t) - 1
	for _, i := range old {
		if i == none {
			continue
		}
		p := home(w.entries[i].id, mask)
		for t[p] != none {
			p = (p + 1) & mask
		}
		t[p] = i
	}
	w.table = t
}
