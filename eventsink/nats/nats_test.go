package nats_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/eventsink/nats"
	"github.com/hourglass/hourglass/eventsink/sinktest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestConformance runs the sink suite against the NATS JetStream server on
// loopback (HOURGLASS_TEST_NATS_URL), each case on a subject and a stream
// of its own, deleted after; the outage case reaches NATS through a proxy
// it cuts.
func TestConformance(t *testing.T) {
	testenv.Require(t, testenv.Default, testenv.Full)
	sinktest.Run(t, harness(t))
}

// TestBench measures the sink (sinktest.Bench): set HOURGLASS_BENCH_SINKS=1.
func TestBench(t *testing.T) { sinktest.Bench(t, harness(t)) }

// harness is the suite's view of this broker.
func harness(t *testing.T) sinktest.Harness {
	base := testenv.ServiceURL(t, "NATS", "HOURGLASS_TEST_NATS_URL", "nats://127.0.0.1:4222")
	return sinktest.Harness{
		Destination: func(t *testing.T, outage bool) sinktest.Destination {
			nc, err := natsgo.Connect(base)
			if err != nil {
				t.Fatal(err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			name := sinktest.Name(t)
			subject := "hourglass.test." + name
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
			if err != nil {
				t.Fatalf("create stream %s: %v", name, err)
			}
			t.Cleanup(func() {
				_ = js.DeleteStream(context.Background(), name)
				nc.Close()
			})
			var got []sinktest.Received
			next := uint64(1)
			d := sinktest.Destination{Read: func(t *testing.T) []sinktest.Received {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				info, err := stream.Info(ctx)
				if err != nil {
					t.Fatalf("stream info: %v", err)
				}
				for ; next <= info.State.LastSeq; next++ {
					m, err := stream.GetMsg(ctx, next)
					if errors.Is(err, jetstream.ErrMsgNotFound) {
						continue
					}
					if err != nil {
						t.Fatalf("get message %d: %v", next, err)
					}
					got = append(got, sinktest.Received{ID: m.Header.Get("id"), Type: m.Header.Get("type"), Key: m.Header.Get("key"), Body: m.Data})
				}
				return got
			}}
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			if outage {
				p := testenv.NewProxy(t, u.Host)
				u.Host = p.Addr()
				d.Cut = func(*testing.T) { p.Cut() }
				d.Restore = func(*testing.T) { p.Restore() }
			}
			u.Path = "/" + subject
			d.URL = u.String()
			return d
		},
		Open: func(ctx context.Context, url string) (eventsink.Sink, error) {
			return nats.Open(ctx, nats.Config{URL: url, Timeout: 2 * time.Second})
		},
	}
}
