package kafka

import (
	"container/heap"

	"github.com/twmb/franz-go/pkg/kgo"
)

// entry is one record a tier consumer received and has not yet committed.
type entry struct {
	rec  *kgo.Record
	left int  // its timers not yet forwarded or delivered
	done bool // all forwarded or delivered; its offset may be committed
}

// item is one timer of an entry, held until it is due.
type item struct {
	e     *entry
	timer timerValue
	due   int64 // unix ms: Release in a coarse tier, Deadline in the finest
}

// finish records that the item's timer was forwarded or delivered.
func (it *item) finish() {
	if it.e.left--; it.e.left == 0 {
		it.e.done = true
	}
}

// partition is what a tier consumer holds of one assigned partition. Records
// are received in offset order but may be done out of order (the finest
// tier fires by deadline, and a packed record's timers one by one), so the
// committable offset is the end of the longest done prefix of entries. It
// is used by one goroutine only.
type partition struct {
	entries []*entry // received and not yet committed, in offset order
	waiting itemHeap // timers not done, earliest due first
	lastDue int64    // due of the newest timer received
	paused  bool     // fetching is paused in the client
}

// add appends a received record with its timers, each due at due(timer). A
// record that cannot be decoded (no timers) is added done, so that its
// offset is committed past: it cannot fire (the sweeper closes its order).
func (p *partition) add(rec *kgo.Record, vs []timerValue, due func(timerValue) int64) {
	e := &entry{rec: rec, left: len(vs), done: len(vs) == 0}
	p.entries = append(p.entries, e)
	for _, v := range vs {
		it := &item{e: e, timer: v, due: due(v)}
		heap.Push(&p.waiting, it)
		p.lastDue = it.due
	}
}

// popDue moves timers due at or before now from waiting to out, up to
// limit in out.
func (p *partition) popDue(now int64, limit int, out []*item) []*item {
	for len(out) < limit && len(p.waiting) > 0 && p.waiting[0].due <= now {
		out = append(out, heap.Pop(&p.waiting).(*item))
	}
	return out
}

// requeue puts back a timer popDue returned whose effect failed.
func (p *partition) requeue(it *item) { heap.Push(&p.waiting, it) }

// nextDue returns the earliest due of the waiting timers.
func (p *partition) nextDue() (int64, bool) {
	if len(p.waiting) == 0 {
		return 0, false
	}
	return p.waiting[0].due, true
}

// held returns how many timers are not done.
func (p *partition) held() int { return len(p.waiting) }

// advance drops the done prefix of entries and returns its last record (the
// one whose offset+1 is to be committed), or nil if the prefix is empty.
func (p *partition) advance() *kgo.Record {
	var last *kgo.Record
	i := 0
	for ; i < len(p.entries) && p.entries[i].done; i++ {
		last = p.entries[i].rec
		p.entries[i] = nil
	}
	p.entries = p.entries[i:]
	if len(p.entries) == 0 {
		p.entries = nil // let the backing array go
	}
	return last
}

// wantPause reports whether fetching the partition should stop: while it
// holds maxHeld timers, or, when lookahead >= 0 (a coarse tier, whose
// records are due in the order they were written), while its newest record
// is due more than lookahead ms from now: the records behind it are due no
// earlier, so fetching them now would only fill memory. The finest tier
// (lookahead < 0) must keep fetching: a record written after one due in a
// second may be due in a millisecond.
func (p *partition) wantPause(now, lookahead int64, maxHeld int) bool {
	n := p.held()
	return n > 0 && (n >= maxHeld || (lookahead >= 0 && p.lastDue > now+lookahead))
}

// itemHeap is a min-heap of timers by due, then their record's offset.
type itemHeap []*item

func (h itemHeap) Len() int { return len(h) }
func (h itemHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].e.rec.Offset < h[j].e.rec.Offset
}
func (h itemHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)   { *h = append(*h, x.(*item)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
