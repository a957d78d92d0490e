package kafka

import (
	"container/heap"

	"github.com/twmb/franz-go/pkg/kgo"
)

// entry is one record a tier consumer received and has not yet committed.
type entry struct {
	rec   *kgo.Record
	timer timerValue
	due   int64 // unix ms: Release in a coarse tier, Deadline in the finest
	done  bool  // forwarded or delivered; its offset may be committed
}

// partition is what a tier consumer holds of one assigned partition. Records
// are received in offset order but may be done out of order (the finest
// tier fires by deadline), so the committable offset is the end of the
// longest done prefix of entries. It is used by one goroutine only.
type partition struct {
	entries []*entry  // received and not yet committed, in offset order
	waiting entryHeap // entries not done, earliest due first
	lastDue int64     // due of the newest entry received
	paused  bool      // fetching is paused in the client
}

// add appends a received record. A record that cannot be decoded is added
// done, so that its offset is committed past: it cannot fire (the sweeper
// closes its order).
func (p *partition) add(rec *kgo.Record, v timerValue, due int64, bad bool) {
	e := &entry{rec: rec, timer: v, due: due, done: bad}
	p.entries = append(p.entries, e)
	if !bad {
		heap.Push(&p.waiting, e)
		p.lastDue = due
	}
}

// popDue moves entries due at or before now from waiting to out, up to
// limit entries in out.
func (p *partition) popDue(now int64, limit int, out []*entry) []*entry {
	for len(out) < limit && len(p.waiting) > 0 && p.waiting[0].due <= now {
		out = append(out, heap.Pop(&p.waiting).(*entry))
	}
	return out
}

// requeue puts back an entry popDue returned whose effect failed.
func (p *partition) requeue(e *entry) { heap.Push(&p.waiting, e) }

// nextDue returns the earliest due of the waiting entries.
func (p *partition) nextDue() (int64, bool) {
	if len(p.waiting) == 0 {
		return 0, false
	}
	return p.waiting[0].due, true
}

// held returns how many entries are not done.
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
// holds maxHeld records, or, when lookahead >= 0 (a coarse tier, whose
// records are due in the order they were written), while its newest record
// is due more than lookahead ms from now: the records behind it are due no
// earlier, so fetching them now would only fill memory. The finest tier
// (lookahead < 0) must keep fetching: a record written after one due in a
// second may be due in a millisecond.
func (p *partition) wantPause(now, lookahead int64, maxHeld int) bool {
	n := p.held()
	return n > 0 && (n >= maxHeld || (lookahead >= 0 && p.lastDue > now+lookahead))
}

// entryHeap is a min-heap of entries by due, then offset.
type entryHeap []*entry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].rec.Offset < h[j].rec.Offset
}
func (h entryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)   { *h = append(*h, x.(*entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
