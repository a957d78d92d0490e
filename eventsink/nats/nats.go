// Package nats is the NATS JetStream event sink (nats://host:port/subject):
// each event is one message on the subject, published to JetStream and
// acknowledged by the stream that captures the subject (which must exist:
// the shop's platform owns its limits and retention). The message id
// (Nats-Msg-Id) is the event's id, so the stream itself drops a duplicate
// within its duplicate window; headers "id" and "type" carry the event's
// id and type. One connection publishes in order. It uses nats.go, as
// delay/nats does.
package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglass/hourglass/eventsink"
)

// TimeoutDefault bounds connecting and each publish.
const TimeoutDefault = 10 * time.Second

// Config configures a Sink.
type Config struct {
	// URL is nats://[user:password@]host:port/subject.
	URL string
	// Timeout bounds Open and each Publish (default TimeoutDefault).
	Timeout time.Duration
}

// ParseURL returns the server URL and the subject of a nats:// sink URL,
// or an error naming what is wrong.
func ParseURL(raw string) (server, subject string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", errors.New("not a URL (percent-encode reserved characters in the user or password)")
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return "", "", fmt.Errorf("scheme must be nats or tls, got %q", u.Scheme)
	}
	subject = strings.TrimPrefix(u.Path, "/")
	if subject == "" || strings.ContainsAny(subject, " /*>") {
		return "", "", errors.New("want nats://host:4222/subject: one subject (no wildcards) as the path")
	}
	if u.RawQuery != "" {
		return "", "", errors.New("no query parameters are known")
	}
	srv := *u
	srv.Path, srv.RawPath = "", ""
	return srv.String(), subject, nil
}

// Sink publishes to one subject. It is used by one goroutine at a time.
type Sink struct {
	nc      *natsgo.Conn
	js      jetstream.JetStream
	subject string
	timeout time.Duration
}

var _ eventsink.Sink = (*Sink)(nil)

// Open connects (reconnecting for ever after) and checks that a stream
// captures the subject. Errors are one line naming the server or the
// subject.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	name := eventsink.Redact(cfg.URL)
	server, subject, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("nats sink %s: %w", name, err)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = TimeoutDefault
	}
	nc, err := natsgo.Connect(server,
		natsgo.Name("hourglass event sink"),
		natsgo.Timeout(min(timeout, 5*time.Second)),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250*time.Millisecond),
		natsgo.RetryOnFailedConnect(false),
		// No reconnect buffer: a publish while disconnected fails at once.
		// With one, an attempt's messages that missed the cut waited in it
		// and reached the stream after the reconnect, ahead of the retry
		// of the same batch's earlier messages the cut lost: a key's
		// events out of order (seen in the sinks' outage test). The sink
		// retries the batch from the database, in order, and JetStream
		// drops the copies already stored (Nats-Msg-Id).
		natsgo.ReconnectBufSize(-1),
	)
	if err != nil {
		return nil, fmt.Errorf("nats sink %s: connect: %w", name, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(timeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats sink %s: jetstream: %w", name, err)
	}
	openCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := js.StreamNameBySubject(openCtx, subject); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats sink %s: no JetStream stream captures subject %q (create one): %w", name, subject, err)
	}
	return &Sink{nc: nc, js: js, subject: subject, timeout: timeout}, nil
}

// Publish implements eventsink.Sink: every message published
// asynchronously, in order, then every acknowledgement awaited.
func (s *Sink) Publish(ctx context.Context, msgs []eventsink.Message) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	acks := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		msg := &natsgo.Msg{Subject: s.subject, Data: m.Body, Header: natsgo.Header{}}
		msg.Header.Set("id", m.ID)
		msg.Header.Set("type", string(m.Type))
		msg.Header.Set("key", m.Key)
		f, err := s.js.PublishMsgAsync(msg, jetstream.WithMsgID(m.ID))
		if err != nil {
			return fmt.Errorf("nats sink: publish to %s: %w", s.subject, err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("nats sink: publish to %s: %w", s.subject, err)
		case <-ctx.Done():
			return fmt.Errorf("nats sink: publish to %s: no acknowledgement: %w", s.subject, ctx.Err())
		}
	}
	return nil
}

// Close implements eventsink.Sink.
func (s *Sink) Close() error {
	s.nc.Close()
	return nil
}
