package amqp_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	amqpgo "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/eventsink/amqp"
	"github.com/hourglass/hourglass/eventsink/sinktest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestConformance runs the sink suite against the RabbitMQ on loopback
// (HOURGLASS_TEST_RABBITMQ_URL), each case on an exchange and a queue of
// its own bound to it, deleted after; the outage case reaches RabbitMQ
// through a proxy it cuts.
func TestConformance(t *testing.T) {
	testenv.Require(t, testenv.Default, testenv.Full)
	sinktest.Run(t, harness(t))
}

// TestBench measures the sink (sinktest.Bench): set HOURGLASS_BENCH_SINKS=1.
func TestBench(t *testing.T) { sinktest.Bench(t, harness(t)) }

// harness is the suite's view of this broker.
func harness(t *testing.T) sinktest.Harness {
	base := testenv.ServiceURL(t, "RabbitMQ", "HOURGLASS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
	return sinktest.Harness{
		Destination: func(t *testing.T, outage bool) sinktest.Destination {
			conn, err := amqpgo.Dial(base)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			name := sinktest.Name(t)
			if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(name, "#", name, false, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = ch.QueueDelete(name, false, false, false)
				_ = ch.ExchangeDelete(name, false, false)
				conn.Close()
			})
			var (
				mu  sync.Mutex
				got []sinktest.Received
			)
			d := sinktest.Destination{Read: func(t *testing.T) []sinktest.Received {
				mu.Lock()
				defer mu.Unlock()
				for {
					m, ok, err := ch.Get(name, true)
					if err != nil {
						t.Fatalf("get from %s: %v", name, err)
					}
					if !ok {
						return got
					}
					key, _ := m.Headers["key"].(string)
					got = append(got, sinktest.Received{ID: m.MessageId, Type: m.Type, Key: key, Body: m.Body})
				}
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
			u.Path = "/" + name
			q := url.Values{"routing_key": {"hourglass.events"}}
			u.RawQuery = q.Encode()
			d.URL = u.String()
			return d
		},
		Open: func(ctx context.Context, url string) (eventsink.Sink, error) {
			return amqp.Open(ctx, amqp.Config{URL: url, Timeout: 2 * time.Second})
		},
	}
}

// TestParseURL checks the vhost and exchange split of the path.
func TestParseURL(t *testing.T) {
	for _, c := range []struct{ url, vhost, exchange, key string }{
		{"amqp://guest:guest@h:5672/orders", "/", "orders", ""},
		{"amqp://h/shop/orders?routing_key=hg", "shop", "orders", "hg"},
		{"amqp://h/%2F/orders", "/", "orders", ""},
	} {
		tg, err := amqp.ParseURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if tg.URI.Vhost != c.vhost || tg.Exchange != c.exchange || tg.RoutingKey != c.key {
			t.Errorf("%s: vhost %q exchange %q key %q, want %q %q %q", c.url, tg.URI.Vhost, tg.Exchange, tg.RoutingKey, c.vhost, c.exchange, c.key)
		}
	}
	for _, bad := range []string{"amqp://h/", "amqp://h", "amqp://h/x?foo=1", "http://h/x"} {
		if _, err := amqp.ParseURL(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
