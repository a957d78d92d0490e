// Package wait holds the one polling wait that work which gives way to
// more urgent work uses: webhook deliveries to a close path working
// through a burst, and a store's deferred fan-out to its closes.
package wait

import (
	"context"
	"time"
)

// While waits while busy reports true, asking every poll, and at most max:
// work that gives way is delayed by busy work, never stopped by it. It
// returns false when ctx ended first, true otherwise (busy ended, or max
// passed). busy is called at once, then after each poll.
func While(ctx context.Context, busy func() bool, poll, max time.Duration) bool {
	if !busy() {
		return ctx.Err() == nil
	}
	giveUp := time.NewTimer(max)
	defer giveUp.Stop()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-giveUp.C:
			return true
		case <-t.C:
			if !busy() {
				return true
			}
		}
	}
}
