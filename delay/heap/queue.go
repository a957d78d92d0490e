package heap

// entry is one pending timer: an order id and its deadline in unix ms.
type entry struct {
	deadline int64
	id       int64
}

// before orders entries by deadline, then by id, so equal deadlines fire in
// a deterministic order.
func (a entry) before(b entry) bool {
	return a.deadline < b.deadline || (a.deadline == b.deadline && a.id < b.id)
}

// compactMin is the size below which a queue never rebuilds its storage:
// small queues are cheap whatever their capacity.
const compactMin = 4096

// queue is a binary min-heap of timers ordered by deadline, with an index
// from order id to position so that Remove, and Add of an id already held,
// cost O(log n). It holds at most one timer per id. It is not safe for
// concurrent use and never reads the clock: PopDue is given "now".
//
// Go maps never shrink, so a queue that held a burst of a million timers
// would keep the burst's index forever. So once a queue that held at least
// compactMin timers falls to a quarter of that peak, it rebuilds the index
// and the slice at the current size: an O(n) step paid for by the 3n/4
// removals before it.
type queue struct {
	items []entry
	index map[int64]int // id → position in items
	peak  int           // the most items held since the last rebuild
}

func newQueue() *queue { return &queue{index: make(map[int64]int)} }

// Len returns the number of timers held.
func (q *queue) Len() int { return len(q.items) }

// Add holds a timer for id due at deadline (unix ms). If id is already held
// its deadline is replaced. O(log n).
func (q *queue) Add(id, deadline int64) {
	if i, ok := q.index[id]; ok {
		old := q.items[i].deadline
		q.items[i].deadline = deadline
		if deadline < old {
			q.up(i)
		} else {
			q.down(i)
		}
		return
	}
	q.items = append(q.items, entry{deadline: deadline, id: id})
	i := len(q.items) - 1
	q.index[id] = i
	q.up(i)
	q.peak = max(q.peak, len(q.items))
}

// Remove drops id's timer and reports whether it was held. O(log n).
func (q *queue) Remove(id int64) bool {
	i, ok := q.index[id]
	if !ok {
		return false
	}
	q.removeAt(i)
	q.compact()
	return true
}

// Next returns the earliest deadline held; ok is false when the queue is
// empty.
func (q *queue) Next() (deadline int64, ok bool) {
	if len(q.items) == 0 {
		return 0, false
	}
	return q.items[0].deadline, true
}

// PopDue removes every timer with deadline <= now, calling fire for each in
// (deadline, id) order, and returns how many fired. O(k log n) for k fired.
func (q *queue) PopDue(now int64, fire func(id, deadline int64)) int {
	n := 0
	for len(q.items) > 0 && q.items[0].deadline <= now {
		e := q.items[0]
		q.removeAt(0)
		fire(e.id, e.deadline)
		n++
	}
	if n > 0 {
		q.compact()
	}
	return n
}

func (q *queue) removeAt(i int) {
	last := len(q.items) - 1
	delete(q.index, q.items[i].id)
	if i != last {
		q.items[i] = q.items[last]
		q.index[q.items[i].id] = i
	}
	q.items = q.items[:last]
	if i != last {
		// The moved entry may belong above or below its new position.
		if !q.up(i) {
			q.down(i)
		}
	}
}

// up moves the entry at i towards the root until its parent is earlier and
// reports whether it moved.
func (q *queue) up(i int) bool {
	start := i
	e := q.items[i]
	for i > 0 {
		p := (i - 1) / 2
		if !e.before(q.items[p]) {
			break
		}
		q.items[i] = q.items[p]
		q.index[q.items[i].id] = i
		i = p
	}
	q.items[i] = e
	q.index[e.id] = i
	return i != start
}

// down moves the entry at i towards the leaves until both children are
// later.
func (q *queue) down(i int) {
	n := len(q.items)
	e := q.items[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && q.items[r].before(q.items[c]) {
			c = r
		}
		if !q.items[c].before(e) {
			break
		}
		q.items[i] = q.items[c]
		q.index[q.items[i].id] = i
		i = c
	}
	q.items[i] = e
	q.index[e.id] = i
}

// compact rebuilds the index and the slice when the queue has fallen to a
// quarter of its peak, so memory follows the pending count down.
func (q *queue) compact() {
	if q.peak < compactMin || len(q.items) > q.peak/4 {
		return
	}
	items := make([]entry, len(q.items), 2*len(q.items))
	copy(items, q.items)
	index := make(map[int64]int, len(items))
	for i, e := range items {
		index[e.id] = i
	}
	q.items, q.index, q.peak = items, index, len(items)
}
