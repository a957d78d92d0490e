// Package writequeue is the queue in front of a store's group-commit
// writers: writes wait in it, and each writer takes what is waiting as one
// batch for one transaction. Urgent writes (closes) are taken before normal
// ones (API writes), so a burst of creates cannot make a deadline late, and
// low ones (bookkeeping such as recording webhook delivery attempts) come
// last, so a backlog of them cannot make the API slow.
package writequeue

import (
	"sync"
	"time"
)

// Queue holds items waiting for the writers. Its zero value is not ready:
// use New. It is safe for concurrent use by many producers and consumers.
type Queue[T any] struct {
	mu             sync.Mutex
	urgent, normal []T
	low            []T
	closed         bool
	ready          chan struct{} // holds a token while there is work or after Close
	// weight and budget bound the urgent items of one batch (see
	// NewBudgeted); weight is nil for no bound.
	weight func(T) int
	budget int
}

// New returns an empty, open queue.
func New[T any]() *Queue[T] { return &Queue[T]{ready: make(chan struct{}, 1)} }

// NewBudgeted returns an empty, open queue whose Take puts urgent items into
// a batch only while their weights add up to at most budget (always at
// least one): a store whose closes weigh by their order count keeps each
// transaction short, so the API writes sharing or waiting for it are not
// held up by a whole burst's closes.
func NewBudgeted[T any](weight func(T) int, budget int) *Queue[T] {
	q := New[T]()
	q.weight, q.budget = weight, budget
	return q
}

// Push queues item, ahead of every normal item when urgent. It returns false,
// queueing nothing, once the queue is closed.
func (q *Queue[T]) Push(item T, urgent bool) bool { return q.PushAll([]T{item}, urgent) }

// PushAll queues items together, in order: a writer that takes any of them
// takes as many of them as its batch has room for. It returns false,
// queueing nothing, once the queue is closed.
func (q *Queue[T]) PushAll(items []T, urgent bool) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if urgent {
		q.urgent = append(q.urgent, items...)
	} else {
		q.normal = append(q.normal, items...)
	}
	q.mu.Unlock()
	q.wake()
	return true
}

func (q *Queue[T]) wake() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// PushLow queues item behind every urgent and normal item: a writer takes
// it only into a batch with room left after those. It returns false,
// queueing nothing, once the queue is closed.
func (q *Queue[T]) PushLow(item T) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.low = append(q.low, item)
	q.mu.Unlock()
	q.wake()
	return true
}

// Len returns how many items are waiting (urgent, normal and low).
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.urgent) + len(q.normal) + len(q.low)
}

// Normal returns how many normal items are waiting.
func (q *Queue[T]) Normal() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.normal)
}

// Urgent returns how many urgent items are waiting.
func (q *Queue[T]) Urgent() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.urgent)
}

// Close refuses further pushes; the items already queued are still taken.
// It is idempotent.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

// Take blocks until there is work and appends up to max items to batch,
// urgent first, then normal, then low, each in the order they were pushed. It returns batch unchanged
// (empty) once the queue is closed and drained.
func (q *Queue[T]) Take(batch []T, max int) []T {
	for {
		q.mu.Lock()
		n := min(max, len(q.urgent))
		if q.weight != nil {
			n = q.underBudget(n)
		}
		batch = append(batch, q.urgent[:n]...)
		q.urgent = shift(q.urgent, n)
		m := min(max-n, len(q.normal))
		batch = append(batch, q.normal[:m]...)
		q.normal = shift(q.normal, m)
		l := min(max-n-m, len(q.low))
		batch = append(batch, q.low[:l]...)
		q.low = shift(q.low, l)
		closed, more := q.closed, len(q.urgent)+len(q.normal)+len(q.low) > 0
		q.mu.Unlock()
		if more || closed {
			q.wake() // another writer may take the rest, or see the close
		}
		if len(batch) > 0 || closed {
			return batch
		}
		<-q.ready
	}
}

// Wait blocks until an item is pushed (true), or stop fires or the queue
// is closed (false). A push no Take has answered yet counts: Wait may
// return true at once. It takes nothing; a writer gathering a batch
// (writer.Config.Gather) waits with it for the next write, and stops
// gathering at a close.
func (q *Queue[T]) Wait(stop <-chan time.Time) bool {
	select {
	case <-q.ready:
	case <-stop:
		return false
	}
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		q.wake() // the other writers see the close too
		return false
	}
	return true
}

// underBudget returns how many of the first n urgent items fit the budget
// (at least one when n > 0); q.mu must be held.
func (q *Queue[T]) underBudget(n int) int {
	total := 0
	for i := range n {
		total += q.weight(q.urgent[i])
		if i > 0 && total > q.budget {
			return i
		}
	}
	return n
}

// shift drops the first n items, releasing the backing array when empty.
func shift[T any](items []T, n int) []T {
	if n == len(items) {
		return nil
	}
	clear(items[:n])
	return items[n:]
}
