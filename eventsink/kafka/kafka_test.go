package kafka_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/eventsink/kafka"
	"github.com/hourglass/hourglass/eventsink/sinktest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestConformance runs the sink suite against kfake, franz-go's in-process
// Kafka (no Kafka broker can be installed on this machine), one cluster a
// case, its topic created by the sink. The outage case's cluster persists
// to a data directory: Cut closes it (listeners and connections go), and
// Restore starts a new one on the same port from the same directory, with
// the topic and its records, as a restarted broker would.
func TestConformance(t *testing.T) {
	testenv.Require(t, testenv.Default, testenv.Full)
	sinktest.Run(t, harness(t))
}

// TestBench measures the sink (sinktest.Bench): set HOURGLASS_BENCH_SINKS=1.
func TestBench(t *testing.T) { sinktest.Bench(t, harness(t)) }

// harness is the suite's view of this broker.
func harness(t *testing.T) sinktest.Harness {
	return sinktest.Harness{
		Destination: func(t *testing.T, outage bool) sinktest.Destination {
			dir, port := t.TempDir(), freePort(t)
			var (
				mu      sync.Mutex
				cluster *kfake.Cluster
			)
			start := func() {
				var err error
				// The port may linger for a moment after a close: 50 tries,
				// one every 100 ms.
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
			topic := sinktest.Name(t)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			var (
				cl  *kgo.Client
				got []sinktest.Received
			)
			d := sinktest.Destination{
				URL: "kafka://" + addr + "/" + topic,
				Read: func(t *testing.T) []sinktest.Received {
					if cl == nil {
						var err error
						if cl, err = kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())); err != nil {
							t.Fatal(err)
						}
						t.Cleanup(cl.Close)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					fs := cl.PollFetches(ctx)
					fs.EachRecord(func(r *kgo.Record) {
						rec := sinktest.Received{Key: string(r.Key), Body: r.Value}
						for _, h := range r.Headers {
							switch h.Key {
							case "id":
								rec.ID = string(h.Value)
							case "type":
								rec.Type = string(h.Value)
							}
						}
						got = append(got, rec)
					})
					return got
				},
			}
			if outage {
				d.Cut = func(*testing.T) { mu.Lock(); cluster.Close(); mu.Unlock() }
				d.Restore = func(*testing.T) { mu.Lock(); start(); mu.Unlock() }
			}
			return d
		},
		Open: func(ctx context.Context, url string) (eventsink.Sink, error) {
			return kafka.Open(ctx, kafka.Config{URL: url, Timeout: 2 * time.Second})
		},
	}
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
