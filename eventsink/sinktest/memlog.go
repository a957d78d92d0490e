package sinktest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// MemLog is an in-memory hourglass.EventLog whose seqs, like a database
// server's, are handed out before the event is visible: Reserve takes a
// seq, Commit makes its event visible, Rollback leaves a gap for ever. It
// lets the suite write events that become visible after later ones.
// Safe for concurrent use.
type MemLog struct {
	mu      sync.Mutex
	next    int64
	events  map[int64]hourglass.EventRecord // visible
	cursors map[string]map[int]int64
	saves   int
	// fail makes Events fail (a database outage); failRanges only the
	// reads with an upper bound (a Publisher's reads of its gaps).
	fail, failRanges bool
}

var _ hourglass.EventLog = (*MemLog)(nil)

// NewMemLog returns an empty log.
func NewMemLog() *MemLog {
	return &MemLog{events: map[int64]hourglass.EventRecord{}, cursors: map[string]map[int]int64{}}
}

// Reserve takes the next seq for an event of orderID, not visible yet.
func (l *MemLog) Reserve() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	return l.next
}

// Commit makes the event of seq visible: an order event of orderID with
// id "evt_<seq>" and a JSON body naming both.
func (l *MemLog) Commit(seq, orderID int64, typ hourglass.EventType, at time.Time) hourglass.EventRecord {
	id := "evt_" + strconv.FormatInt(seq, 10)
	e := hourglass.EventRecord{
		Seq: seq, ID: id, Type: typ, OrderID: orderID, CreatedAt: at,
		Body: fmt.Appendf(nil, `{"id":%q,"type":%q,"order":{"id":%d}}`, id, typ, orderID),
	}
	l.mu.Lock()
	l.events[seq] = e
	l.mu.Unlock()
	return e
}

// Append reserves and commits at once.
func (l *MemLog) Append(orderID int64, typ hourglass.EventType, at time.Time) hourglass.EventRecord {
	return l.Commit(l.Reserve(), orderID, typ, at)
}

// SetFailing makes Events fail (true) or work again.
func (l *MemLog) SetFailing(v bool) {
	l.mu.Lock()
	l.fail = v
	l.mu.Unlock()
}

// SetFailingRanges makes the reads with an upper bound (EventPage.Until)
// fail (true) or work again.
func (l *MemLog) SetFailingRanges(v bool) {
	l.mu.Lock()
	l.failRanges = v
	l.mu.Unlock()
}

// Events implements hourglass.EventLog.
func (l *MemLog) Events(_ context.Context, p hourglass.EventPage) ([]hourglass.EventRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail || (l.failRanges && p.Until > 0) {
		return nil, hourglass.Errorf(hourglass.CodeUnavailable, "memlog: down")
	}
	until := p.Until
	if until <= 0 || until > l.next {
		until = l.next
	}
	var out []hourglass.EventRecord
	for s := p.After + 1; s <= until && len(out) < p.Limit; s++ {
		if e, ok := l.events[s]; ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// SinkCursors implements hourglass.EventLog.
func (l *MemLog) SinkCursors(_ context.Context, sink string) ([]hourglass.SinkCursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []hourglass.SinkCursor
	for part, seq := range l.cursors[sink] {
		out = append(out, hourglass.SinkCursor{Sink: sink, Part: part, Seq: seq})
	}
	slices.SortFunc(out, func(a, b hourglass.SinkCursor) int { return a.Part - b.Part })
	return out, nil
}

// SaveSinkCursors implements hourglass.EventLog.
func (l *MemLog) SaveSinkCursors(_ context.Context, cs []hourglass.SinkCursor, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.saves++
	for _, c := range cs {
		m := l.cursors[c.Sink]
		if m == nil {
			m = map[int]int64{}
			l.cursors[c.Sink] = m
		}
		m[c.Part] = max(m[c.Part], c.Seq)
	}
	return nil
}

// MinCursor returns sink's lowest cursor over every partition (0 for a
// partition without one).
func (l *MemLog) MinCursor(sink string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	low := int64(-1)
	for part := range hourglass.Partitions {
		c := l.cursors[sink][part]
		if low < 0 || c < low {
			low = c
		}
	}
	return low
}
