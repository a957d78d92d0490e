package sqlpoll_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/sqlpoll"
	"github.com/hourglass/hourglass/hourglasstest/outage"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestOutage would stop the mechanism's broker mid-load. sqlpoll's only
// service is the order database, SQLite, which is embedded in the process:
// there is no server to stop, and if the database fails the sweeper fails
// with it. TestOutageHarness runs the same load without an outage.
func TestOutage(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	t.Skip("sqlpoll's store is embedded SQLite: there is no server to stop (see TestOutageHarness)")
}

// TestOutageHarness runs the outage harness with sqlpoll over the harness's
// store, at the default poll interval, and a no-op outage: the whole close
// path with the engine's real delivery, checked for lost and doubled closes.
func TestOutageHarness(t *testing.T) {
	t.Parallel()
	outage.Run(t, outage.Config{
		Open: func(t *testing.T, store hourglass.Store) hourglass.Scheduler {
			s, err := sqlpoll.New(context.Background(), sqlpoll.Config{Store: store})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Outage: func(t *testing.T) {},
		Orders: 200,
	})
}
