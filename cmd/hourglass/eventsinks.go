package main

import (
	"regexp"
	"strings"

	"github.com/hourglass/hourglass/node"
)

// eventSinkFlags are the event sinks (package eventsink): where the event
// log is published.
type eventSinkFlags struct {
	EventSink  []string `help:"Publish every event to this bus, at least once, in order per order or timer key (repeatable): kafka://host:9092/topic, amqp://user:pass@host:5672/[vhost/]exchange?routing_key=key, nats://host:4222/subject (JetStream), redis://host:6379/0?stream=name. HOURGLASS_EVENT_SINKS holds several, comma-separated (docs/integrating.md)." sep:"none" placeholder:"URL"`
	EventSinks string   `help:"The event sinks, comma-separated (as --event-sink)." env:"HOURGLASS_EVENT_SINKS" hidden:""`
}

// sinkStart matches where a URL starts inside a comma-separated list: a
// Kafka URL's seed list has commas too, but no scheme after them.
var sinkStart = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://`)

// config returns every sink URL, each checked (node.ValidateEventSink):
// an error is one line naming the bad URL, without its password.
func (f eventSinkFlags) config() ([]string, error) {
	urls := append([]string(nil), f.EventSink...)
	var cur string
	for _, part := range strings.Split(f.EventSinks, ",") {
		switch {
		case strings.TrimSpace(part) == "":
		case cur != "" && !sinkStart.MatchString(strings.TrimSpace(part)):
			cur += "," + part // a Kafka seed list
		default:
			if cur != "" {
				urls = append(urls, cur)
			}
			cur = strings.TrimSpace(part)
		}
	}
	if cur != "" {
		urls = append(urls, cur)
	}
	for _, u := range urls {
		if err := node.ValidateEventSink(u); err != nil {
			return nil, err
		}
	}
	return urls, nil
}
