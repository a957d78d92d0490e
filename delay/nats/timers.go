package nats

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// names are the stream, consumers and subjects of one namespace.
type names struct {
	stream   string // <ns>-timers: the unpartitioned stream of earlier versions
	consumer string // <ns>-closer: each stream's durable consumer
	subjects string // <ns>.timers.>
	due      string // <ns>.timers.due: the unpartitioned subject of earlier versions
	sched    string // <ns>.timers.sched: prefix of message schedules (earlier versions)
	part     string // <ns>.part: prefix of the partitions' subjects
}

// partStream is partition p's stream, <ns>-timers-<p>.
func (n names) partStream(p int) string { return n.stream + "-" + strconv.Itoa(p) }

// partSubjects are the subjects of partition p's stream, <ns>.part.<p>.>.
func (n names) partSubjects(p int) string { return n.part + "." + strconv.Itoa(p) + ".>" }

// partDue is partition p's due subject, <ns>.part.<p>.due: what the
// consumer of its stream reads.
func (n names) partDue(p int) string { return n.part + "." + strconv.Itoa(p) + ".due" }

// partSchedSubject is the subject of an order's message schedule in
// partition p's stream.
func (n names) partSchedSubject(p int, orderID int64) string {
	return n.part + "." + strconv.Itoa(p) + ".sched." + strconv.FormatInt(orderID, 10)
}

// namesFor derives the names of namespace ns. Stream and consumer names may
// not contain '.', '*', '>', whitespace or path separators, and a subject
// token may not contain wildcards or whitespace, so every character outside
// [A-Za-z0-9_-] becomes '_' (two namespaces that differ only there share a
// stream).
func namesFor(ns string) names {
	clean := sanitize(ns)
	return names{
		stream:   clean + "-timers",
		consumer: clean + "-closer",
		subjects: clean + ".timers.>",
		due:      clean + ".timers.due",
		sched:    clean + ".timers.sched",
		part:     clean + ".part",
	}
}

func (n names) schedSubject(orderID int64) string {
	return n.sched + "." + strconv.FormatInt(orderID, 10)
}

func sanitize(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}

// timerBody is a timer as a message body.
type timerBody struct {
	OrderID    int64 `json:"order_id"`
	DeadlineMs int64 `json:"deadline_ms"`
}

func encodeTimer(t hourglass.DueItem) []byte {
	b, _ := json.Marshal(timerBody{OrderID: t.ID, DeadlineMs: hourglass.UnixMilli(t.At)})
	return b
}

func decodeTimer(b []byte) (hourglass.DueItem, error) {
	var body timerBody
	if err := json.Unmarshal(b, &body); err != nil {
		return hourglass.DueItem{}, fmt.Errorf("decode timer %q: %w", b, err)
	}
	if body.OrderID <= 0 || body.DeadlineMs <= 0 {
		return hourglass.DueItem{}, fmt.Errorf("decode timer %q: order id and deadline must be positive", b)
	}
	return hourglass.DueItem{ID: body.OrderID, At: hourglass.FromUnixMilli(body.DeadlineMs)}, nil
}

// action is what Run does with a fetched message.
type action int

const (
	deliverNow action = iota // due: deliver, then acknowledge
	holdLocal                // due within the hold window: local timer
	nakLater                 // due later: negatively acknowledge with a delay
)

// classify decides what to do with a message due at deadline, received at
// now, and returns the wait: the local timer's duration for holdLocal, the
// negative acknowledgement's delay for nakLater (the time left minus
// nakLead, so the message comes back inside the hold window).
func classify(now, deadline time.Time, holdWindow, nakLead time.Duration) (action, time.Duration) {
	left := deadline.Sub(now)
	switch {
	case left <= 0:
		return deliverNow, 0
	case left <= holdWindow:
		return holdLocal, left
	}
	return nakLater, left - nakLead
}

// scheduleAt returns when a message schedule should release a timer due at
// deadline: lead before it, rounded down to a whole second (the @at format
// has whole seconds), and ok false when that is less than a second away
// (publish the timer directly instead).
func scheduleAt(now, deadline time.Time, lead time.Duration) (time.Time, bool) {
	at := deadline.Add(-lead).Truncate(time.Second)
	return at, at.Sub(now) >= time.Second
}

// supportsSchedules reports whether a server of this version ("2.12.1",
// "v2.14.0-RC.1") implements message schedules (2.12 and later).
func supportsSchedules(version string) bool {
	major, minor, ok := parseVersion(version)
	return ok && (major > 2 || major == 2 && minor >= 12)
}

func parseVersion(v string) (major, minor int, ok bool) {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minorStr, _, _ := strings.Cut(parts[1], "-")
	minor, err2 := strconv.Atoi(minorStr)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// retryDelay is the redelivery delay after the n-th consecutive failed
// delivery (n >= 1): 100 ms doubling, capped at maxDelay.
func retryDelay(n int, maxDelay time.Duration) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}
