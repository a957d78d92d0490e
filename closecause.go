package hourglass

import (
	"context"
	"strings"
	"unicode/utf8"
)

// CloseCause says what closed an order or fired a timer: its provenance,
// recorded with the order.closed or timer.fired event in the close's own
// transaction, so that a history can answer "why was this one late?".
// Events written before provenance was recorded have none (CauseUnknown).
type CloseCause string

// Close causes. Each names the part of the engine that made the close.
const (
	// CauseDeadline: the close path at the deadline (the delay mechanism
	// delivered the deadline).
	CauseDeadline CloseCause = "deadline"
	// CauseSweeper: the sweeper found the deadline passed and not closed
	// (a deadline the mechanism lost or was late with).
	CauseSweeper CloseCause = "sweeper"
	// CauseRecovery: start-up recovery closed a deadline that passed while
	// hourglass was down.
	CauseRecovery CloseCause = "recovery"
	// CauseTakeover: the node closed a deadline that passed in a partition
	// it gained (its old owner stopped or died).
	CauseTakeover CloseCause = "takeover"
	// CauseCheckClose: the payment check before the close answered
	// "close".
	CauseCheckClose CloseCause = "check_close"
	// CauseCheckFailed: the payment check failed MaxFailures times in a
	// row and --before-close-on-error=close closed the order anyway.
	CauseCheckFailed CloseCause = "check_failed"
	// CauseUnknown: the close was recorded before provenance was (or by a
	// caller that did not say).
	CauseUnknown CloseCause = "unknown"
)

// CloseNodeMaxBytes bounds the node id a store keeps of a Closer (a
// cluster's node ids are at most 200 ASCII characters already).
const CloseNodeMaxBytes = 200

// Closer is the provenance of a close or a fire: what made it and on which
// node (Config.NodeID). The zero value is unknown.
type Closer struct {
	Cause CloseCause
	Node  string
}

// Known reports whether c says anything.
func (c Closer) Known() bool { return c.Cause != "" && c.Cause != CauseUnknown }

type closerKey struct{}

// WithCloser returns ctx carrying c: Store.CloseOrders and
// TimerStore.FireTimers record it with the events they write. The engine
// sets it on each close call; a call without it records no provenance.
// Provenance is metadata, not input to the close's decision, so it rides
// on the context rather than widening the two methods every test calls.
func WithCloser(ctx context.Context, c Closer) context.Context {
	return context.WithValue(ctx, closerKey{}, c)
}

// CloserFrom returns the Closer ctx carries (zero: none), safe to store:
// a cause that is not one of the constants above is dropped (with its
// node), and the node is cut to CloseNodeMaxBytes of valid UTF-8.
func CloserFrom(ctx context.Context) Closer {
	c, _ := ctx.Value(closerKey{}).(Closer)
	switch c.Cause {
	case CauseDeadline, CauseSweeper, CauseRecovery, CauseTakeover, CauseCheckClose, CauseCheckFailed:
	default:
		return Closer{}
	}
	node := strings.ToValidUTF8(c.Node, "")
	for len(node) > CloseNodeMaxBytes {
		_, size := utf8.DecodeLastRuneInString(node)
		node = node[:len(node)-size]
	}
	c.Node = node
	return c
}
