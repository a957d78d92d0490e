package redis_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/eventsink/redis"
	"github.com/hourglass/hourglass/eventsink/sinktest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestConformance runs the sink suite against the Redis on loopback
// (HOURGLASS_TEST_REDIS_URL), each case on a stream of its own, deleted
// after; the outage case reaches Redis through a proxy it cuts.
func TestConformance(t *testing.T) {
	testenv.Require(t, testenv.Default, testenv.Full)
	sinktest.Run(t, harness(t))
}

// TestBench measures the sink (sinktest.Bench): set HOURGLASS_BENCH_SINKS=1.
func TestBench(t *testing.T) { sinktest.Bench(t, harness(t)) }

// harness is the suite's view of this broker.
func harness(t *testing.T) sinktest.Harness {
	base := testenv.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
	return sinktest.Harness{
		Destination: func(t *testing.T, outage bool) sinktest.Destination {
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			opt, err := goredis.ParseURL(base)
			if err != nil {
				t.Fatal(err)
			}
			rdb := goredis.NewClient(opt)
			stream := sinktest.Name(t)
			t.Cleanup(func() {
				rdb.Del(context.Background(), stream)
				rdb.Close()
			})
			d := sinktest.Destination{Read: func(t *testing.T) []sinktest.Received {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
				if err != nil {
					t.Fatalf("XRANGE %s: %v", stream, err)
				}
				out := make([]sinktest.Received, len(msgs))
				for i, m := range msgs {
					out[i] = sinktest.Received{ID: str(m.Values["id"]), Type: str(m.Values["type"]), Key: str(m.Values["key"]), Body: []byte(str(m.Values["body"]))}
				}
				return out
			}}
			if outage {
				p := testenv.NewProxy(t, u.Host)
				u.Host = p.Addr()
				d.Cut = func(*testing.T) { p.Cut() }
				d.Restore = func(*testing.T) { p.Restore() }
			}
			q := u.Query()
			q.Set("stream", stream)
			u.RawQuery = q.Encode()
			d.URL = u.String()
			return d
		},
		Open: func(ctx context.Context, url string) (eventsink.Sink, error) {
			return redis.Open(ctx, redis.Config{URL: url, Timeout: 2 * time.Second})
		},
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
