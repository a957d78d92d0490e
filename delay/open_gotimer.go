package delay

import (
	"context"
	"errors"

	"github.com/hourglass/hourglass"
)

// openGotimer is replaced when the gotimer mechanism lands.
func openGotimer(ctx context.Context, o Options) (hourglass.Scheduler, error) {
	return nil, errors.New("the gotimer delay mechanism is not built yet")
}
