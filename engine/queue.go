package engine

import "sync"

// dueQueue is the unbounded FIFO of fired order ids between the timer loop
// and the closers. Unbounded because the wheel may fire tens of thousands in
// one millisecond and the timer loop must never block on the database.
type dueQueue struct {
	mu     sync.Mutex
	ids    []int64
	closed bool
	ready  chan struct{} // holds a token while ids is non-empty or closed
}

func (q *dueQueue) init() { q.ready = make(chan struct{}, 1) }

func (q *dueQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *dueQueue) push(ids []int64) {
	q.mu.Lock()
	q.ids = append(q.ids, ids...)
	q.mu.Unlock()
	q.signal()
}

func (q *dueQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// pop blocks until ids are queued and returns up to max of them; ok is false
// once the queue is closed.
func (q *dueQueue) pop(max int) (ids []int64, ok bool) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			q.signal() // let the other closers see it too
			return nil, false
		}
		if len(q.ids) > 0 {
			n := min(max, len(q.ids))
			ids = append([]int64(nil), q.ids[:n]...)
			q.ids = q.ids[n:]
			more := len(q.ids) > 0
			if !more {
				q.ids = nil
			}
			q.mu.Unlock()
			if more {
				q.signal()
			}
			return ids, true
		}
		q.mu.Unlock()
		<-q.ready
	}
}
