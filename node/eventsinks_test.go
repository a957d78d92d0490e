package node_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
)

// TestEventSinkDown: a node whose event sink's broker does not answer
// (nothing listens at its address) starts, answers /readyz 200 and takes
// orders; the sink's lag grows in hourglass_event_sink_lag_seconds, whose
// label is the URL without its password, and failures are counted.
func TestEventSinkDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	sinkURL := "redis://:s3cret@" + dead + "/0?stream=orders"
	n, err := node.New(context.Background(), node.Config{
		Addr:       "127.0.0.1:0",
		Store:      store.Options{DataDir: t.TempDir()},
		TimerMax:   1000,
		EventSinks: []string{sinkURL},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()

	base := "http://" + n.Addr().String()
	c := api.NewClient(base, "", nil)
	if _, err := c.PutProduct(ctx, "A", "a", "", 10); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateOrder(ctx, api.CreateOrderRequest{UserID: "u", Items: []api.ItemJSON{{SKU: "A", Quantity: 1}}, TimeoutMs: 60000}, ""); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	lagLine := `hourglass_event_sink_lag_seconds{sink="redis://` + dead + `/0?stream=orders"}`
	testenv.Eventually(t, 10*time.Second, "the lag above 0.5 s", func() bool {
		_, m := get("/metrics")
		for _, l := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(l, lagLine+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				return err == nil && f > 0.5
			}
		}
		return false
	})
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with the sink's broker down: %d %s, want 200", code, body)
	}
	_, m := get("/metrics")
	if strings.Contains(m, "s3cret") {
		t.Errorf("/metrics shows the sink's password")
	}
	if !strings.Contains(m, `hourglass_event_sink_failures_total{sink="redis://`+dead+`/0?stream=orders"}`) {
		t.Errorf("no failures counter for the sink in /metrics")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestValidateEventSink: each bad URL's error names it without its
// password and says what is wrong.
func TestValidateEventSink(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"kafka://k:9092/orders", ""},
		{"kafka://k1:9092,k2:9092/orders", ""},
		{"amqp://u:pw@r:5672/shop/orders?routing_key=x", ""},
		{"nats://n:4222/orders.events", ""},
		{"redis://:pw@r:6379/0?stream=orders", ""},
		{"kafka://k:9092", "topic"},
		{"amqp://u:pw@r:5672/", "no exchange"},
		{"nats://n:4222/orders.*", "wildcards"},
		{"redis://:pw@r:6379/0", "stream"},
		{"http://h/x", "scheme"},
	} {
		err := node.ValidateEventSink(c.url)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.url, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.url, err, c.want)
		case err != nil && strings.Contains(err.Error(), "pw"):
			t.Errorf("%s: the error shows the password: %v", c.url, err)
		}
	}
}
