package mysql_test

import (
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
)

// TestGaleraConformance runs the conformance suite on a 3-node Galera
// cluster: every case on node 1, and the cases with two store values with
// one on node 1 and the other on node 2.
func TestGaleraConformance(t *testing.T) {
	t.Parallel()
	galeratest.Nodes(t)
	hourglasstest.ExerciseStore(t, hourglasstest.StoreHarness{
		Open: func(t *testing.T, o hourglasstest.StoreOptions) hourglass.Database {
			return open(t, galeratest.NewDatabase(t)[0], o.Clock, o.Outbox)
		},
		OpenShared: func(t *testing.T, o hourglasstest.StoreOptions) (a, b hourglass.Database) {
			urls := galeratest.NewDatabase(t)
			return open(t, urls[0], o.Clock, o.Outbox), open(t, urls[1], o.Clock, o.Outbox)
		},
	})
}
