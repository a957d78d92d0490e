package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"log/slog"
	"strings"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/bulk"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/webhook"
)

// newBulk returns the runner of filtered bulk actions (package bulk): every
// node runs one; each action is run by the node holding its lease, and
// another node takes it over when that one dies. Its owner name is the
// node's id and a random part, so a restarted node under the same id does
// not take its predecessor's lease for its own.
func newBulk(db hourglass.Database, nodeID string, hooks *webhook.Service, m *metrics.Metrics, clock hourglass.Clock, log *slog.Logger) (*bulk.Runner, error) {
	tc, ok := clock.(hourglass.TimerClock)
	if !ok {
		tc = hourglass.SystemClock{} // sleeps only: leases are the database's time
	}
	owner := cmp.Or(nodeID, cluster.DefaultNodeID()) + "/" + strings.ToLower(rand.Text()[:8])
	return bulk.New(bulk.Config{Store: db, Owner: owner, Clock: tc, Log: log, Retried: hooks.Retried, Observe: m.BulkRunning})
}

// startBulk runs r until ctx ends; wait blocks until it has stopped (each
// action it runs after its page in flight).
func startBulk(ctx context.Context, r *bulk.Runner) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx) // returns nil when ctx ends; errors are logged and retried
	}()
	return func() { <-done }
}
