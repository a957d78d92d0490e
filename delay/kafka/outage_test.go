package kafka_test

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/hourglasstest/outage"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestOutage runs the whole close path through a broker outage. No Kafka
// broker can be installed on this machine, so the broker is a kfake cluster
// that persists to a data directory: the outage closes it (listeners and
// connections go, its state is saved) and, 3 s later, starts a new one on
// the same port from the same directory, with the topics, records and
// committed offsets the first one had, as a restarted broker would.
func TestOutage(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	dir, port := t.TempDir(), freePort(t)
	var (
		mu      sync.Mutex
		cluster *kfake.Cluster
	)
	start := func() {
		var err error
		// The port may linger for a moment after the close: 50 tries, one
		// every 100 ms. start runs off the test's goroutine too (Outage).
		retry := time.NewTicker(100 * time.Millisecond)
		defer retry.Stop()
		for range 50 {
			if cluster, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir)); err == nil {
				return
			}
			<-retry.C
		}
		t.Fatalf("start kfake on port %d: %v", port, err)
	}
	start()
	t.Cleanup(func() { mu.Lock(); cluster.Close(); mu.Unlock() })
	url := fmt.Sprintf("kafka://127.0.0.1:%d", port)
	outage.Run(t, outage.Config{
		Open: func(t *testing.T, _ hourglass.Store) hourglass.Scheduler {
			return open(t, url, hourglasstest.Namespace(t), &cleaner{})
		},
		Outage: func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			cluster.Close()
			// The broker stays down 3 s. Outage runs off the test's
			// goroutine: no testenv.Phase.
			testenv.Until(t.Context(), time.Now().Add(3*time.Second))
			start()
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
			if err != nil {
				t.Errorf("the restarted broker does not accept connections: %v", err)
				return
			}
			conn.Close()
		},
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
