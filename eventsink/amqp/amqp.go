// Package amqp is the RabbitMQ event sink
// (amqp://user:password@host:5672/[vhost/]exchange?routing_key=key): each
// event is one persistent message published to the exchange with publisher
// confirms, mandatory (a message no queue is bound for is an error, retried,
// not lost), its message id the event's id, its type the event's type, and
// headers "id" and "type". The routing key is routing_key, or the event's
// type when the URL has none (a topic exchange can route by it). One
// channel publishes in order, so one order's messages stay in order in
// every queue. It uses amqp091-go, as delay/rabbitmq does.
package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/internal/amqpdial"
)

// TimeoutDefault bounds a dial and each publish.
const TimeoutDefault = 10 * time.Second

// Config configures a Sink.
type Config struct {
	// URL is amqp[s]://user:password@host:port/[vhost/]exchange?routing_key=key
	// (vhost "/" when the path is only the exchange; percent-encode a
	// vhost's slashes).
	URL string
	// Timeout bounds a dial and each Publish (default TimeoutDefault).
	Timeout time.Duration
}

// Target is what a sink URL names.
type Target struct {
	URI        amqp.URI // the broker and vhost
	Exchange   string
	RoutingKey string // "": the event's type
}

// ParseURL returns what an amqp:// sink URL names, or an error (never with
// the password) naming what is wrong.
func ParseURL(raw string) (Target, error) {
	var t Target
	u, err := url.Parse(raw)
	if err != nil {
		return t, errors.New("not a URL (percent-encode reserved characters in the user or password)")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return t, fmt.Errorf("scheme must be amqp or amqps, got %q", u.Scheme)
	}
	segs := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	last := segs[len(segs)-1]
	if last == "" {
		return t, errors.New("want amqp://user:password@host:5672/[vhost/]exchange?routing_key=key: no exchange in the path")
	}
	if t.Exchange, err = url.PathUnescape(last); err != nil {
		return t, fmt.Errorf("exchange %q: %v", last, err)
	}
	vhost := "/"
	if len(segs) > 1 {
		if vhost, err = url.PathUnescape(strings.Join(segs[:len(segs)-1], "/")); err != nil {
			return t, fmt.Errorf("vhost: %v", err)
		}
	}
	q := u.Query()
	t.RoutingKey = q.Get("routing_key")
	for k := range q {
		if k != "routing_key" {
			return t, fmt.Errorf("unknown parameter %q (only routing_key)", k)
		}
	}
	dial := *u
	dial.RawQuery = ""
	dial.Path, dial.RawPath = "/"+vhost, "/"+url.PathEscape(vhost)
	if t.URI, err = amqp.ParseURI(dial.String()); err != nil {
		return t, errors.New("bad broker address (want amqp://user:password@host:5672/…)")
	}
	return t, nil
}

// Sink publishes to one exchange. It reconnects on the next Publish after
// a failure. It is used by one goroutine at a time.
type Sink struct {
	target  Target
	url     string // the dial URL
	name    string // redacted, for errors
	timeout time.Duration
	conn    *amqp.Connection
	ch      *amqp.Channel
	// returned counts the messages the broker returned unroutable on the
	// current channel; lastReturn describes the latest. A goroutine drains
	// the channel's returns (the library blocks until they are read).
	returned   *atomic.Int64
	lastReturn *atomic.Value
	returns    chan amqp.Return
}

var _ eventsink.Sink = (*Sink)(nil)

// Open connects and checks that the exchange exists. Errors are one line
// naming the broker or the exchange.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	name := eventsink.Redact(cfg.URL)
	t, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("amqp sink %s: %w", name, err)
	}
	s := &Sink{target: t, url: t.URI.String(), name: name, timeout: cfg.Timeout}
	if s.timeout <= 0 {
		s.timeout = TimeoutDefault
	}
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// connect opens the connection and a confirming channel, checking the
// exchange.
func (s *Sink) connect(ctx context.Context) error {
	s.drop()
	addr := net.JoinHostPort(s.target.URI.Host, strconv.Itoa(s.target.URI.Port))
	conn, err := amqp.DialConfig(s.url, amqpdial.Config(ctx, "hourglass event sink "+s.name, s.timeout))
	if err != nil {
		return fmt.Errorf("amqp sink %s: connect to %s: %w", s.name, addr, err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.ExchangeDeclarePassive(s.target.Exchange, "topic", true, false, false, false, nil)
		if err != nil {
			err = fmt.Errorf("exchange %q does not exist in vhost %q (declare it and bind your queues): %w", s.target.Exchange, s.target.URI.Vhost, err)
		}
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("amqp sink %s: %w", s.name, err)
	}
	s.conn, s.ch = conn, ch
	returned, last := new(atomic.Int64), new(atomic.Value)
	s.returned, s.lastReturn = returned, last
	returns := ch.NotifyReturn(make(chan amqp.Return, 64))
	s.returns = returns
	go func() {
		for r := range returns { // closed with the channel
			last.Store(fmt.Sprintf("%d %s: bind a queue to exchange %q for routing key %q", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey))
			returned.Add(1)
		}
	}()
	return nil
}

// drop closes the connection, if any.
func (s *Sink) drop() {
	if s.conn != nil {
		s.conn.Close()
	}
	s.conn, s.ch = nil, nil
}

// Publish implements eventsink.Sink: every message on one channel, then
// every confirm; a nack, a return (no queue bound) or a broken connection
// is an error, and the connection is opened again on the next call.
func (s *Sink) Publish(ctx context.Context, msgs []eventsink.Message) (err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.ch == nil || s.conn.IsClosed() {
		if err := s.connect(ctx); err != nil {
			return err
		}
	}
	defer func() {
		if err != nil {
			s.drop()
		}
	}()
	returnedBefore := s.returned.Load()
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		key := s.target.RoutingKey
		if key == "" {
			key = string(m.Type)
		}
		confirms[i], err = s.ch.PublishWithDeferredConfirmWithContext(ctx, s.target.Exchange, key, true, false, amqp.Publishing{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    m.ID,
			Type:         string(m.Type),
			Timestamp:    m.CreatedAt,
			Headers:      amqp.Table{"id": m.ID, "type": string(m.Type), "key": m.Key},
			Body:         m.Body,
		})
		if err != nil {
			return fmt.Errorf("amqp sink %s: publish: %w", s.name, err)
		}
	}
	for _, c := range confirms {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("amqp sink %s: waiting for confirms: %w", s.name, err)
		}
		if !ok {
			return fmt.Errorf("amqp sink %s: the broker refused (nacked) a message", s.name)
		}
	}
	// The broker sends a return before its message's confirm, and the
	// library queues it on returns before it reads on: by now each is
	// counted or still queued.
	if n := s.returned.Load() - returnedBefore + int64(len(s.returns)); n > 0 {
		return fmt.Errorf("amqp sink %s: %d messages returned unroutable (%v)", s.name, n, s.lastReturn.Load())
	}
	return nil
}

// Close implements eventsink.Sink.
func (s *Sink) Close() error {
	s.drop()
	return nil
}
