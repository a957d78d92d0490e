package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// tier is one delay topic, named "<namespace>.delay.<name>".
type tier struct {
	name string
	// hold is how long a record waits in the topic after it was written
	// there; 0 marks the finest tier ("due"), where a record waits for its
	// deadline itself.
	hold time.Duration
}

// The topics of every tier have one partition per hourglass partition
// (hourglass.Partitions): a record carries timers of one partition and is
// written to that partition of its tier, and each process consumes the
// partitions it owns (hourglass.Partitioned), assigned directly, without a
// consumer group. Their names are "<namespace>.timers.<tier>".
const topicInfix = ".timers."

// legacyInfix names the topics of versions before ownership,
// "<namespace>.delay.<tier>": partitioned freely and shared by a consumer
// group per tier. Run drains those that exist (see Scheduler.legacy).
const legacyInfix = ".delay."

// tiers returns the delay topics, finest first, holds increasing. A timer
// goes to the tier with the largest hold that fits in its remaining delay,
// so a record written to a coarse tier at t is released at t+hold, and
// because all records of one tier share the hold, a partition releases its
// records in the order they were written: the consumer only ever waits for
// the head of the partition.
func tiers() []tier {
	return []tier{
		{"due", 0},
		{"1s", time.Second},
		{"10s", 10 * time.Second},
		{"1m", time.Minute},
		{"10m", 10 * time.Minute},
		{"1h", time.Hour},
		{"10h", 10 * time.Hour},
	}
}

// routeSlack is how much of its delay a timer keeps when it reaches the
// finest tier through the coarse ones: the hops' own latency (a produce, a
// fetch) comes out of it instead of making the timer late.
const routeSlack = 250 * time.Millisecond

// route returns the index in ts of the tier for a timer whose deadline is
// remaining from now: the coarsest tier whose hold plus routeSlack fits in
// remaining, or the finest tier (0) when none does.
func route(ts []tier, remaining time.Duration) int {
	for i := len(ts) - 1; i > 0; i-- {
		if ts[i].hold+routeSlack <= remaining {
			return i
		}
	}
	return 0
}

// timerValue is one timer of a delay record. A record of one timer has the
// text form "v1 <order id> <deadline unix ms> <release unix ms>", written by
// encode, so that a person reading a topic with a console consumer can
// follow it (and a process of a version before packing reads it); a packed
// record, written by encodeTimers, is "v2" followed by those three numbers
// for each of its 2..packMax timers.
type timerValue struct {
	OrderID  int64
	Deadline int64 // unix ms
	// Release is when the record leaves its tier (unix ms): written at + the
	// tier's hold, or the deadline in the finest tier.
	Release int64
}

const (
	valueVersion  = "v1"
	packedVersion = "v2"
	// packMax is the most timers one record carries. A tier's cost is per
	// record (a produce, a fetch, a commit, a hop of its own), so a burst of
	// timers scheduled or released together travels as a few hundred
	// records rather than as many records as timers; a packed value stays
	// under 16 KiB.
	packMax = 256
)

func (v timerValue) encode() []byte { return v.append(append(make([]byte, 0, 64), valueVersion...)) }

// append appends " <order id> <deadline> <release>" to b.
func (v timerValue) append(b []byte) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, v.OrderID, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, v.Deadline, 10)
	b = append(b, ' ')
	return strconv.AppendInt(b, v.Release, 10)
}

// encodeTimers returns the value of a record of vs (1..packMax timers).
func encodeTimers(vs []timerValue) []byte {
	if len(vs) == 1 {
		return vs[0].encode()
	}
	b := append(make([]byte, 0, 2+len(vs)*42), packedVersion...)
	for _, v := range vs {
		b = v.append(b)
	}
	return b
}

var errBadValue = errors.New("not a hourglass delay record")

// decodeTimers parses a value written by encode or encodeTimers.
func decodeTimers(b []byte) ([]timerValue, error) {
	f := bytes.Fields(b)
	bad := func() ([]timerValue, error) { return nil, fmt.Errorf("%w: %q", errBadValue, truncate(b, 64)) }
	if len(f) == 0 {
		return bad()
	}
	n := (len(f) - 1) / 3
	switch {
	case (len(f)-1)%3 != 0:
		return bad()
	case string(f[0]) == valueVersion && n == 1:
	case string(f[0]) == packedVersion && n >= 2 && n <= packMax:
	default:
		return bad()
	}
	out := make([]timerValue, n)
	for i := range out {
		var x [3]int64
		for j := range x {
			v, err := strconv.ParseInt(string(f[1+3*i+j]), 10, 64)
			if err != nil {
				return bad()
			}
			x[j] = v
		}
		out[i] = timerValue{OrderID: x[0], Deadline: x[1], Release: x[2]}
	}
	return out, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
