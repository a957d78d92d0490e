// Package wait (part of the timing core, package timing) holds the one
// polling wait that work which gives way to more urgent work uses: webhook
// deliveries to a close path working through a burst, and a store's
// deferred fan-out to its closes.
package wait

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// While is WhileOn the system clock, for callers that hold no clock.
func While(ctx context.Context, busy func() bool, poll, max time.Duration) bool {
	return WhileOn(ctx, hourglass.SystemClock{}, busy, poll, max)
}

// WhileOn waits while busy reports true, asking every poll on clock, and at
// most max: work that gives way is delayed by busy work, never stopped by
// it. It returns false when ctx ended first, true otherwise (busy ended, or
// max passed). busy is called at once, then after each poll.
func WhileOn(ctx context.Context, clock hourglass.TimerClock, busy func() bool, poll, max time.Duration) bool {
	if !busy() {
		return ctx.Err() == nil
	}
	giveUp := clock.NewTimer(max)
	defer giveUp.Stop()
	t := clock.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-giveUp.C():
			return true
		case <-t.C():
			if !busy() {
				return true
			}
		}
	}
}
