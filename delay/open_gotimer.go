package delay

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/gotimer"
)

// openGotimer returns the one-time.AfterFunc-per-order mechanism; it has
// nothing to connect to and never fails.
func openGotimer(_ context.Context, o Options) (hourglass.Scheduler, error) {
	return gotimer.New(gotimer.Config{Clock: o.Clock, Logger: o.Logger}), nil
}
