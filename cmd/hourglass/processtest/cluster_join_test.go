package processtest

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
)

// TestClusterJoinLoneNode is TestClusterKill on two PostgreSQL nodes: once
// the other is killed and its partitions taken over, the node left is
// alone and holds its batches' announcements (store/postgres/quiet.go);
// when the killed node comes back and takes half the partitions, the
// orders and timers the lone node created meanwhile, due within seconds,
// must still be closed and fired within the bound by whichever node owns
// them (a lost announcement would leave them to the sweeper's 30 s grace).
func TestClusterJoinLoneNode(t *testing.T) {
	testenv.Require(t, testenv.Processes)
	const ttl = 2 * time.Second
	testKill(t, setupCluster(t, store.KindPostgres, 2, ttl), ttl)
}
