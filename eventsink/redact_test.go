package eventsink_test

import (
	"testing"

	"github.com/hourglass/hourglass/eventsink"
)

// TestRedact: no password, token or secret parameter survives, and what
// names the destination does.
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"kafka://k1:9092,k2:9092/orders", "kafka://k1:9092,k2:9092/orders"},
		{"amqp://shop:pw@r:5672/vh/orders?routing_key=x", "amqp://shop@r:5672/vh/orders?routing_key=x"},
		{"redis://:pw@r:6379/0?stream=orders", "redis://r:6379/0?stream=orders"},
		{"redis://u:pw@r:6379/0?stream=orders&password=pw2", "redis://u@r:6379/0?password=xxxxx&stream=orders"},
		{"nats://tok@n:4222/orders", "nats://n:4222/orders"},
		{"nats://u:pw@n:4222/orders", "nats://n:4222/orders"},
	} {
		if got := eventsink.Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
