package main

import (
	"slices"
	"strings"
	"testing"
)

// TestEventSinkFlags: --event-sink and HOURGLASS_EVENT_SINKS together, the
// variable split at each comma that starts a URL (a Kafka seed list's
// commas do not), and a bad URL refused in one line naming it without its
// password.
func TestEventSinkFlags(t *testing.T) {
	t.Parallel()
	f := eventSinkFlags{
		EventSink:  []string{"nats://n:4222/orders"},
		EventSinks: "kafka://k1:9092,k2:9092/orders, redis://r:6379/0?stream=orders,amqp://u:pw@r:5672/orders",
	}
	got, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"nats://n:4222/orders", "kafka://k1:9092,k2:9092/orders", "redis://r:6379/0?stream=orders", "amqp://u:pw@r:5672/orders"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	_, err = eventSinkFlags{EventSinks: "amqp://u:secret@r:5672/"}.config()
	if err == nil || !strings.Contains(err.Error(), "--event-sink amqp://u@r:5672/") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a URL without an exchange: %v, want one line naming it without its password", err)
	}
}
