package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openSQLPoll is replaced when the sqlpoll mechanism lands.
func openSQLPoll(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the sqlpoll delay mechanism is not built yet")
}
