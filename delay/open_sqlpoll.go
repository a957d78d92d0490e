package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/sqlpoll"
)

// openSQLPoll returns the poller over o.Store, after one test scan: it fails
// when no store is given, when o.PollInterval is out of range, or when the
// store cannot be read.
func openSQLPoll(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	if o.Store == nil {
		return nil, errors.New("sqlpoll: needs the order database (Options.Store)")
	}
	return sqlpoll.New(ctx, sqlpoll.Config{Store: o.Store, Clock: o.Clock, Logger: o.Logger, PollInterval: o.PollInterval, Parts: o.Parts})
}
