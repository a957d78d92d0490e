package wheel

import (
	"math"
	"math/bits"
)

const (
	bitsPerLevel  = 6
	slotsPerLevel = 1 << bitsPerLevel // 64
	slotMask      = slotsPerLevel - 1
	numLevels     = 6

	// horizonBits is the number of low time bits the levels cover: a timer
	// whose deadline agrees with the clock on every bit from here up fits in
	// the levels; any other waits in the overflow list. 2^36 ms ≈ 795 days.
	horizonBits = bitsPerLevel * numLevels

	// The wheel's lists, numbered so that heads[list] is the first entry and
	// an entry's prev field can name the list it heads (see entry.prev).
	// Lists below numSlots are slots: list = level*slotsPerLevel + slot.
	numSlots     = numLevels * slotsPerLevel
	overflowList = numSlots     // deadlines beyond the top level's current block
	dueList      = numSlots + 1 // deadlines already reached when added; fire on the next Advance
	firingList   = numSlots + 2 // timers the running Advance is about to fire
	numLists     = numSlots + 3
)

// none is the null entry index: an empty list head, the end of a list, the
// end of the free list, an empty index cell.
const none int32 = -1

// entry is one timer, stored by value in Wheel.entries and linked by index,
// so the wheel performs no allocation per timer (24 bytes each).
type entry struct {
	id       uint64
	deadline int64 // in ms, as given to Add
	// next is the following entry in the entry's list (or in the free list),
	// or none.
	next int32
	// prev is the preceding entry, or, for the first entry of a list, ^list
	// (always negative), so that unlinking the head needs no search.
	prev int32
}

// Wheel is a hierarchical timing wheel. See the package documentation for
// the algorithm and the cost of each method.
//
// A Wheel is not safe for concurrent use; the caller must serialise all
// calls. The zero value is not usable: create wheels with New.
type Wheel struct {
	// origin is the time given to New. Internally, times are ticks: uint64
	// milliseconds since origin, which keeps the digit arithmetic unsigned
	// whatever the sign of the caller's times.
	origin int64
	// tick is the current time in ticks. Invariant: every timer in a slot or
	// the overflow list has a deadline after tick; every timer in the due or
	// firing list has a deadline at or before it.
	tick uint64

	// entries is the slab of timers; free chains the unused ones by next.
	entries []entry
	free    int32

	heads [numLists]int32
	// occupied has bit s of word L set iff slot s of level L is non-empty.
	// Invariant: a set bit is always greater than the clock's level-L digit,
	// since the clock stops at each occupied slot's start to cascade it
	// before passing it; so the first set bit is the next slot in time, with
	// no rotation needed.
	occupied [numLevels]uint64

	// overflowMin is a lower bound on the deadlines (in ticks) in the
	// overflow list, meaningful only while it is non-empty. Advance visits
	// the overflow list at the start of the top-level block holding
	// overflowMin, which is after the clock's block, so a timer years away
	// costs one cascade however far the clock jumps.
	overflowMin uint64

	// overdueMin is a lower bound on the deadlines in the due and firing
	// lists, meaningful only while one of them is non-empty (Cancel does not
	// raise it, so it may be stale-low, never high).
	overdueMin int64

	// table maps ids to entry indices: open addressing with linear probing,
	// a power-of-two length (or zero), none for an empty cell, load factor at
	// most maxLoadNum/maxLoadDen, deletion by backward shift (no tombstones).
	table []int32
	count int // number of timers held (entries in table)

	advancing bool // Advance is running; guards against re-entrant Advance
}

// New returns an empty wheel whose clock starts at nowMs.
func New(nowMs int64) *Wheel {
	w := &Wheel{origin: nowMs, free: none}
	for i := range w.heads {
		w.heads[i] = none
	}
	return w
}

// Now returns the wheel's current time in ms: the largest time passed to
// New or Advance so far, except inside a fire callback, where it is the
// time Advance has reached (see Advance).
func (w *Wheel) Now() int64 {
	return w.msAt(w.tick)
}

// Len returns the number of timers scheduled, including those already due
// but not yet fired.
func (w *Wheel) Len() int {
	return w.count
}

// Deadline returns the deadline id is scheduled for, and false (with a zero
// time) if id is not scheduled. A timer stops being scheduled just before
// its fire callback runs.
func (w *Wheel) Deadline(id uint64) (int64, bool) {
	p, ok := w.lookup(id)
	if !ok {
		return 0, false
	}
	return w.entries[w.table[p]].deadline, true
}

// Contains reports whether id is scheduled.
func (w *Wheel) Contains(id uint64) bool {
	_, ok := w.lookup(id)
	return ok
}

// Add schedules id to fire at deadlineMs and reports whether id is new: if
// id is already scheduled its deadline is replaced and Add returns false.
// Adding the same id and deadline twice is therefore idempotent.
//
// A deadline at or before Now fires on the next call to Advance, whatever
// time that call is given; in particular a timer added from a fire callback
// with a deadline at or before Now fires on the next Advance, not the
// running one (so a callback that re-arms itself cannot loop forever).
//
// Add allocates only when the wheel grows past its previous peak size, and
// panics if it would hold more than math.MaxInt32 timers.
func (w *Wheel) Add(id uint64, deadlineMs int64) bool {
	p, found := w.lookup(id)
	if found {
		i := w.table[p]
		w.unlink(i)
		w.entries[i].deadline = deadlineMs
		w.place(i)
		return false
	}
	if (w.count+1)*maxLoadDen > len(w.table)*maxLoadNum {
		w.growTable()
		p, _ = w.lookup(id)
	}
	i := w.alloc(id, deadlineMs)
	w.table[p] = i
	w.count++
	w.place(i)
	return true
}

// Cancel unschedules id and reports whether it was scheduled; cancelling an
// unknown or already fired id does nothing and returns false, so Cancel is
// idempotent. O(1).
func (w *Wheel) Cancel(id uint64) bool {
	p, ok := w.lookup(id)
	if !ok {
		return false
	}
	w.remove(p)
	return true
}

// Advance moves the clock to nowMs and calls fire for every timer whose
// deadline is at or before nowMs, in non-decreasing deadline order (timers
// with the same deadline in no particular order). It returns the number of
// timers fired. A nowMs before Now does not move the clock back; Advance
// then only fires the timers that were already due.
//
// Each timer is unscheduled just before fire is called for it. Within
// Advance the clock steps from one occupied slot to the next, and fire runs
// with Now equal to the time being fired (or the previous Now, for timers
// that were already due). fire may call Add, Cancel, Deadline, Contains,
// Len, Now and NextDeadline: a timer it adds with a deadline after Now and
// at or before nowMs fires later in this same Advance, one at or before
// Now on the next Advance; a timer it cancels does not fire. fire must not
// call Advance (Advance panics if it does) and must not be nil.
//
// If fire panics, the panic propagates; the wheel stays consistent, with
// its clock at the time being fired and the unfired due timers kept for
// the next Advance.
func (w *Wheel) Advance(nowMs int64, fire func(id uint64, deadlineMs int64)) int {
	if w.advancing {
		panic("wheel: Advance called from a fire callback")
	}
	w.advancing = true
	defer w.endAdvance()

	w.collectOverdue()
	fired := w.drainFiring(fire)
	if nowMs <= w.Now() {
		return fired
	}
	target := w.tickAt(nowMs)
	for {
		list, start, ok := w.nextList()
		if !ok || start > target {
			break
		}
		w.tick = start
		if list < slotsPerLevel {
			w.expireLevel0(list)
		} else {
			w.cascade(list)
		}
		fired += w.drainFiring(fire)
	}
	// No occupied slot starts at or before target, so every timer left has
	// a deadline after it, and the slot invariants hold with the clock here.
	w.tick = target
	return fired
}

// NextDeadline returns the earliest time at which Advance would fire
// something, and false if the wheel is empty. The result is never after the
// earliest deadline: it is exact when that timer is within the current
// 64 ms block (a level-0 slot) and otherwise the start of the slot holding
// it, where Advance will cascade it; a caller that sleeps until the result
// and advances there simply asks again. If timers are already due it
// returns a time at or before Now. O(1): it reads the occupancy bitmaps.
func (w *Wheel) NextDeadline() (int64, bool) {
	if w.heads[dueList] != none || w.heads[firingList] != none {
		return w.overdueMin, true
	}
	_, start, ok := w.nextList()
	if !ok {
		return 0, false
	}
	return w.msAt(start), true
}

// tickAt converts a time after origin to ticks.
func (w *Wheel) tickAt(ms int64) uint64 {
	return uint64(ms) - uint64(w.origin) // modular, so exact for any ms >= origin
}

// msAt converts ticks to ms.
func (w *Wheel) msAt(tick uint64) int64 {
	return int64(uint64(w.origin) + tick)
}

// place links entry i into the list where it waits: the due list if its
// deadline has been reached, otherwise the slot at the level of the highest
// base-64 digit in which its deadline differs from the clock, or the
// overflow list if that digit is above the top level.
func (w *Wheel) place(i int32) {
	d := w.entries[i].deadline
	if d <= w.Now() {
		w.pushOverdue(dueList, i, d)
		return
	}
	t := w.tickAt(d)
	// OR-ing in slotMask makes a difference confined to digit 0 give level 0.
	diff := (t ^ w.tick) | slotMask
	if diff>>horizonBits != 0 {
		if w.heads[overflowList] == none || t < w.overflowMin {
			w.overflowMin = t
		}
		w.push(overflowList, i)
		return
	}
	level := (bits.Len64(diff) - 1) / bitsPerLevel
	slot := int(t>>(level*bitsPerLevel)) & slotMask
	w.push(level*slotsPerLevel+slot, i)
}

// nextList returns the non-empty list that Advance must process next and
// the tick at which its slot starts: the first occupied slot of the lowest
// occupied level, else the overflow list at the start of the top-level
// block holding its earliest deadline. A lower level's slots all start
// before the end of the clock's block at the level above, and a higher
// level's slots (and the overflow list) all start at or after it, so the
// lowest level always comes first.
func (w *Wheel) nextList() (list int, start uint64, ok bool) {
	for level, occ := range w.occupied {
		if occ == 0 {
			continue
		}
		slot := bits.TrailingZeros64(occ)
		shift := uint(level * bitsPerLevel)
		blockStart := w.tick >> (shift + bitsPerLevel) << (shift + bitsPerLevel)
		return level*slotsPerLevel + slot, blockStart + uint64(slot)<<shift, true
	}
	if w.heads[overflowList] != none {
		// Every overflow deadline is in a later top-level block than the
		// clock, and so is overflowMin, a past or present one of them.
		return overflowList, w.overflowMin >> horizonBits << horizonBits, true
	}
	return 0, 0, false
}

// expireLevel0 moves the timers of a level-0 slot, all due exactly now, to
// the firing list in one splice. The firing list must be empty, as it is
// between Advance's drainFiring calls.
func (w *Wheel) expireLevel0(slot int) {
	h := w.detach(slot)
	if d := w.entries[h].deadline; w.heads[dueList] == none || d < w.overdueMin {
		w.overdueMin = d
	}
	w.entries[h].prev = ^int32(firingList)
	w.heads[firingList] = h
}

// cascade empties a higher-level slot (or the overflow list) whose start the
// clock has just reached: timers due now go to the firing list, the others
// are placed again relative to the new time, which puts them at a lower
// level (or, for the overflow list, possibly back in it).
func (w *Wheel) cascade(list int) {
	now := w.Now()
	for i := w.detach(list); i != none; {
		next := w.entries[i].next
		if d := w.entries[i].deadline; d <= now {
			w.pushOverdue(firingList, i, d)
		} else {
			w.place(i)
		}
		i = next
	}
}

// endAdvance runs when Advance returns or a fire callback panics: it
// releases the re-entrancy guard and, after a panic, returns the timers
// left unfired to the due list, so they fire on the next Advance.
func (w *Wheel) endAdvance() {
	w.advancing = false
	for i := w.heads[firingList]; i != none; i = w.heads[firingList] {
		w.unlink(i)
		w.pushOverdue(dueList, i, w.entries[i].deadline)
	}
}

// collectOverdue moves the due list to the firing list, sorted by deadline.
// The firing list must be empty, as it is when Advance starts.
func (w *Wheel) collectOverdue() {
	if w.heads[dueList] == none {
		return
	}
	chain := w.sortChain(w.detach(dueList))
	prev := ^int32(firingList)
	for i := chain; i != none; i = w.entries[i].next {
		w.entries[i].prev = prev
		prev = i
	}
	w.heads[firingList] = chain
}

// drainFiring fires the firing list from its head, one timer at a time, so
// that a callback cancelling or re-adding a timer still in the list is
// handled by the ordinary unlink. It returns the number fired.
func (w *Wheel) drainFiring(fire func(id uint64, deadlineMs int64)) int {
	n := 0
	for {
		i := w.heads[firingList]
		if i == none {
			return n
		}
		e := w.entries[i]
		w.remove(w.cellOf(i))
		fire(e.id, e.deadline)
		n++
	}
}

// remove unschedules the timer indexed at table cell p.
func (w *Wheel) remove(p int) {
	i := w.table[p]
	w.unlink(i)
	w.deleteCell(p)
	w.count--
	w.entries[i] = entry{next: w.free, prev: none}
	w.free = i
}

// alloc returns a fresh entry for id, reusing a freed one if there is one.
func (w *Wheel) alloc(id uint64, deadline int64) int32 {
	if i := w.free; i != none {
		w.free = w.entries[i].next
		w.entries[i] = entry{id: id, deadline: deadline, next: none, prev: none}
		return i
	}
	if len(w.entries) >= math.MaxInt32 {
		panic("wheel: more than math.MaxInt32 timers")
	}
	w.entries = append(w.entries, entry{id: id, deadline: deadline, next: none, prev: none})
	return int32(len(w.entries) - 1)
}

// push links entry i at the head of list, marking the slot occupied.
func (w *Wheel) push(list int, i int32) {
	h := w.heads[list]
	w.entries[i].prev = ^int32(list)
	w.entries[i].next = h
	if h != none {
		w.entries[h].prev = i
	}
	w.heads[list] = i
	if list < numSlots {
		w.occupied[list/slotsPerLevel] |= 1 << (list % slotsPerLevel)
	}
}

// pushOverdue pushes entry i, whose deadline d is at or before the clock,
// onto the due or firing list, keeping overdueMin a lower bound.
func (w *Wheel) pushOverdue(list int, i int32, d int64) {
	if (w.heads[dueList] == none && w.heads[firingList] == none) || d < w.overdueMin {
		w.overdueMin = d
	}
	w.push(list, i)
}

// unlink removes entry i from whichever list holds it.
func (w *Wheel) unlink(i int32) {
	e := &w.entries[i]
	if e.next != none {
		w.entries[e.next].prev = e.prev
	}
	if e.prev >= 0 {
		w.entries[e.prev].next = e.next
	} else {
		list := int(^e.prev)
		w.heads[list] = e.next
		if e.next == none && list < numSlots {
			w.occupied[list/slotsPerLevel] &^= 1 << (list % slotsPerLevel)
		}
	}
	e.next, e.prev = none, none
}

// detach empties list and returns its former head; the entries stay chained
// by next (their prev fields are stale until they are pushed elsewhere).
func (w *Wheel) detach(list int) int32 {
	h := w.heads[list]
	w.heads[list] = none
	if list < numSlots {
		w.occupied[list/slotsPerLevel] &^= 1 << (list % slotsPerLevel)
	}
	return h
}

// sortChain sorts a chain of entries linked by next into non-decreasing
// deadline order and returns its new head. It is a bottom-up merge sort, so
// it needs no memory beyond the links: O(n log n) time, O(1) space.
func (w *Wheel) sortChain(head int32) int32 {
	if head == none {
		return none
	}
	e := w.entries
	for width := 1; ; width *= 2 {
		p := head
		head = none
		tail := none
		merges := 0
		for p != none {
			merges++
			// Merge the run of up to width entries at p with the next run at q.
			q, psize := p, 0
			for psize < width && q != none {
				psize++
				q = e[q].next
			}
			qsize := width
			for psize > 0 || (qsize > 0 && q != none) {
				var take int32
				switch {
				case psize == 0:
					take, q = q, e[q].next
					qsize--
				case qsize == 0 || q == none:
					take, p = p, e[p].next
					psize--
				case e[q].deadline < e[p].deadline:
					take, q = q, e[q].next
					qsize--
				default:
					take, p = p, e[p].next
					psize--
				}
				if tail == none {
					head = take
				} else {
					e[tail].next = take
				}
				tail = take
			}
			p = q
		}
		e[tail].next = none
		if merges <= 1 {
			return head
		}
	}
}
