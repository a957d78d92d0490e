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

// timerValue is the value of a delay record. Its text form, written by
// encode, is "v1 <order id> <deadline unix ms> <release unix ms>" so that a
// person reading a topic with a console consumer can follow it.
type timerValue struct {
	OrderID  int64
	Deadline int64 // unix ms
	// Release is when the record leaves its tier (unix ms): written at + the
	// tier's hold, or the deadline in the finest tier.
	Release int64
}

const valueVersion = "v1"

func (v timerValue) encode() []byte {
	b := make([]byte, 0, 64)
	b = append(b, valueVersion...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, v.OrderID, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, v.Deadline, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, v.Release, 10)
	return b
}

var errBadValue = errors.New("not a hourglass delay record")

// decodeTimer parses a value written by encode.
func decodeTimer(b []byte) (timerValue, error) {
	f := bytes.Fields(b)
	if len(f) != 4 || string(f[0]) != valueVersion {
		return timerValue{}, fmt.Errorf("%w: %q", errBadValue, truncate(b, 64))
	}
	var n [3]int64
	for i := range n {
		x, err := strconv.ParseInt(string(f[i+1]), 10, 64)
		if err != nil {
			return timerValue{}, fmt.Errorf("%w: %q", errBadValue, truncate(b, 64))
		}
		n[i] = x
	}
	return timerValue{OrderID: n[0], Deadline: n[1], Release: n[2]}, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
