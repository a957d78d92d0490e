// Package kafka is the Kafka event sink (kafka://host:port[,host:port]/topic):
// each event is one record on the topic, keyed by its order id or timer key
// (so one key's records share a partition and stay in order), with the
// event's JSON as the value and headers "id" and "type". The producer is
// idempotent with acks from every in-sync replica, so a record is on the
// topic when Publish returns nil. It uses franz-go, as delay/kafka does.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/internal/redact"
)

// TimeoutDefault bounds connecting and each publish.
const TimeoutDefault = 10 * time.Second

// Config configures a Sink.
type Config struct {
	// URL is kafka://host:port[,host:port…]/topic.
	URL string
	// Timeout bounds Open's checks and each Publish (default
	// TimeoutDefault).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Sink publishes to one topic. It is used by one goroutine at a time.
type Sink struct {
	cl      *kgo.Client // nil after a failed publish: made again
	opts    []kgo.Opt
	topic   string
	timeout time.Duration
}

var _ eventsink.Sink = (*Sink)(nil)

// ParseURL returns the seed brokers and the topic of a kafka:// URL, or
// an error naming what is wrong.
func ParseURL(raw string) (seeds []string, topic string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("not a URL: %v", redact.Err(err, raw))
	}
	if u.Scheme != "kafka" {
		return nil, "", fmt.Errorf("scheme must be kafka, got %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, "", errors.New("want kafka://host:port/topic: no host")
	}
	topic = strings.Trim(u.Path, "/")
	if topic == "" || strings.Contains(topic, "/") {
		return nil, "", errors.New("want kafka://host:port/topic: one topic name as the path")
	}
	for _, h := range strings.Split(u.Host, ",") {
		if !strings.Contains(h, ":") {
			h += ":9092"
		}
		seeds = append(seeds, h)
	}
	return seeds, topic, nil
}

// Open connects and checks that the topic exists (creating it with the
// broker's defaults when it does not). Errors are one line naming the
// brokers or the topic.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	seeds, topic, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("kafka sink %s: %w", eventsink.Redact(cfg.URL), err)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = TimeoutDefault
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.DialTimeout(min(timeout, 5*time.Second)),
		kgo.RecordDeliveryTimeout(timeout),
		kgo.ProduceRequestTimeout(timeout),
		kgo.RetryTimeout(timeout),
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: client: %w", err)
	}
	s := &Sink{cl: cl, opts: opts, topic: topic, timeout: timeout}
	openCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cl.Ping(openCtx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka sink: no Kafka broker reachable at %s: %w", strings.Join(seeds, ","), err)
	}
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(openCtx, topic)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka sink: describe topic %s: %w", topic, err)
	}
	if d, ok := td[topic]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		if _, err := adm.CreateTopic(openCtx, -1, -1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			cl.Close()
			return nil, fmt.Errorf("kafka sink: topic %s does not exist and could not be created (create it): %w", topic, err)
		}
		log.Info("kafka sink: created the topic with the broker's defaults", "topic", topic)
	} else if d.Err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka sink: topic %s: %w", topic, d.Err)
	}
	return s, nil
}

// Publish implements eventsink.Sink: one produce of every record, waiting
// for every acknowledgement. After a failure the client is made anew on
// the next call: an idempotent producer whose records timed out cannot
// produce to their partitions again.
func (s *Sink) Publish(ctx context.Context, msgs []eventsink.Message) error {
	if s.cl == nil {
		cl, err := kgo.NewClient(s.opts...)
		if err != nil {
			return fmt.Errorf("kafka sink: client: %w", err)
		}
		s.cl = cl
	}
	recs := make([]*kgo.Record, len(msgs))
	// No Timestamp from the event: franz-go times a record's delivery from
	// its timestamp, so an old event's would time out at once (the
	// body's created_at says when the event was written).
	for i, m := range msgs {
		recs[i] = &kgo.Record{
			Key:     []byte(m.Key),
			Value:   m.Body,
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(m.ID)}, {Key: "type", Value: []byte(m.Type)}},
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		s.cl.Close()
		s.cl = nil
		return fmt.Errorf("kafka sink: produce to %s: %w", s.topic, err)
	}
	return nil
}

// Close implements eventsink.Sink.
func (s *Sink) Close() error {
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
	return nil
}
