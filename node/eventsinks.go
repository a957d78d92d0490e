package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/eventsink/amqp"
	"github.com/hourglass/hourglass/eventsink/kafka"
	"github.com/hourglass/hourglass/eventsink/nats"
	"github.com/hourglass/hourglass/eventsink/redis"
	"github.com/hourglass/hourglass/metrics"
)

// MaxEventSinkURL is the longest --event-sink URL (the cursors table keys
// a sink by its redacted URL, at most 500 characters on MySQL).
const MaxEventSinkURL = 400

// ValidateEventSink checks an --event-sink URL's form: a known scheme and
// what its broker's sink needs (a topic, an exchange, a subject, a
// stream). The error names the URL without its password and says what is
// wrong; nothing is dialled.
func ValidateEventSink(raw string) error {
	name := eventsink.Redact(raw)
	if len(raw) > MaxEventSinkURL {
		return fmt.Errorf("--event-sink %s: at most %d bytes, got %d", name, MaxEventSinkURL, len(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--event-sink %s: not a URL", name)
	}
	switch u.Scheme {
	case "kafka":
		_, _, err = kafka.ParseURL(raw)
	case "amqp", "amqps":
		_, err = amqp.ParseURL(raw)
	case "nats", "tls":
		_, _, err = nats.ParseURL(raw)
	case "redis", "rediss":
		_, err = redis.ParseURL(raw)
	default:
		err = errors.New("scheme must be kafka, amqp, amqps, nats, tls, redis or rediss")
	}
	if err != nil {
		return fmt.Errorf("--event-sink %s: %w", name, err)
	}
	return nil
}

// openEventSink returns the Sink of a valid URL, connecting at its first
// publish (eventsink.Dial).
func openEventSink(raw string, log *slog.Logger) eventsink.Sink {
	u, _ := url.Parse(raw)
	return eventsink.Dial(func(ctx context.Context) (eventsink.Sink, error) {
		switch u.Scheme {
		case "kafka":
			return kafka.Open(ctx, kafka.Config{URL: raw, Logger: log})
		case "amqp", "amqps":
			return amqp.Open(ctx, amqp.Config{URL: raw})
		case "nats", "tls":
			return nats.Open(ctx, nats.Config{URL: raw})
		default:
			return redis.Open(ctx, redis.Config{URL: raw})
		}
	})
}

// eventSinks is the node's event sinks (--event-sink): a Publisher each,
// publishing the partitions this node owns.
type eventSinks struct {
	pubs  []*eventsink.Publisher
	sinks []eventsink.Sink
}

// newEventSinks validates urls and builds a Publisher for each (none
// connects before Run). Two URLs naming the same sink are an error.
func newEventSinks(urls []string, log hourglass.EventLog, self *member, m *metrics.Metrics, clock hourglass.Clock, logger *slog.Logger) (*eventSinks, error) {
	s := &eventSinks{}
	if len(urls) == 0 {
		return s, nil
	}
	var own eventsink.Ownership
	if o := self.ownership(); o != nil {
		own = o
	}
	names := make([]string, len(urls))
	lags := make(map[string]func() time.Duration, len(urls))
	s.pubs = make([]*eventsink.Publisher, len(urls))
	for i, raw := range urls {
		if err := ValidateEventSink(raw); err != nil {
			return nil, err
		}
		names[i] = eventsink.Redact(raw)
		if lags[names[i]] != nil {
			return nil, fmt.Errorf("--event-sink %s: given twice", names[i])
		}
		lags[names[i]] = func() time.Duration { return s.pubs[i].Lag() } // set below, before any scrape
	}
	obs := m.EventSinks(lags)
	for i, raw := range urls {
		sink := openEventSink(raw, logger)
		p, err := eventsink.New(eventsink.Config{Name: names[i], Sink: sink, Log: log, Ownership: own, Clock: clock, Logger: logger, Observer: obs})
		if err != nil {
			return nil, err
		}
		s.sinks = append(s.sinks, sink)
		s.pubs[i] = p
	}
	return s, nil
}

// lagSource returns s as the event_sink_lag rule's source, nil without
// sinks (the rule is left out).
func (s *eventSinks) lagSource() alert.EventSinkLagSource {
	if len(s.pubs) == 0 {
		return nil
	}
	return s
}

// MaxLag implements alert.EventSinkLagSource.
func (s *eventSinks) MaxLag() (string, time.Duration) {
	var (
		worst string
		lag   time.Duration
	)
	for _, p := range s.pubs {
		if l := p.Lag(); l > lag || worst == "" {
			worst, lag = p.Name(), l
		}
	}
	return worst, lag
}

// start runs every Publisher until ctx ends; the returned stop waits for
// them (each saves its cursors as it stops) and closes the sinks.
func (s *eventSinks) start(ctx context.Context) (stop func()) {
	var wg sync.WaitGroup
	for _, p := range s.pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.Run(ctx)
		}()
	}
	return func() {
		wg.Wait()
		for _, sink := range s.sinks {
			sink.Close()
		}
	}
}
