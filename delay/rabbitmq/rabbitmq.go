// Package rabbitmq is a delay mechanism that keeps timers in RabbitMQ
// (3.10 or later): they survive the crash of every hourglass process and
// fire into whichever process consumes.
//
// # How a timer travels
//
// Without plugins RabbitMQ delays a message only by letting it expire in a
// queue with a TTL and dead-lettering it. A per-message TTL is useless for
// that (a message expires only when it reaches the head of its queue, so a
// short delay waits behind a long one); a per-queue TTL is FIFO-exact. So a
// namespace ns has a ladder of tier queues, ns.tier.1s, ns.tier.2s, ns.tier.4s
// … ns.tier.524288s (1 s doubling to about 6 days; see [Tiers]), each a quorum
// queue whose x-message-ttl is its tier and whose dead-letter exchange is
// ns.router, a direct exchange bound to the quorum queue ns.due.
//
// Schedule publishes a timer with remaining delay d to the longest tier
// whose TTL is at most d minus a margin (default 1 s), persistent and with
// publisher confirms; it returns once every publish was confirmed and none
// came back unroutable. When the message expires it is dead-lettered into
// ns.due. The consumer (Run) reads ns.due and looks at the deadline again:
// still at least a tier plus the margin away, it publishes the timer to the
// next tier (and acks the arrival only after that publish is confirmed);
// within the last stretch (under the shortest tier plus the margin, 2 s) it
// holds the delivery unacknowledged in memory and wakes at the deadline's
// millisecond; due, it hands it to Deliver and acks only after Deliver
// returned nil. A timer 30 min away goes 1024 s → 512 s → 256 s → 4 s → 2 s
// → in memory; a delay takes at most one hop per tier.
//
// Timers published together that go to the same place (a tier, the due
// queue, or the same plugin delay) travel packed, up to 256 in one message:
// each has at least that tier's TTL plus the margin left, so the tier suits
// them all, and the consumer sorts each timer of an arriving message on its
// own. A message is acknowledged once all its timers were delivered or
// forwarded; if a Deliver of any of them fails the message goes back whole
// (at least once) and its timers still in memory are dropped. A message of
// one timer keeps the original shape, so an older consumer reads it.
//
// The margin is the least time a timer has left when it leaves its last
// tier, and so the dead-lettering lag it tolerates before it is late. That
// lag is small for timers spread over time (a few ms) but grows with
// bursts: the broker dead-letters a few thousand messages a second per
// queue, which packing turns into hundreds of thousands of timers a second
// when they were scheduled together (a flash sale's orders, relayed from the
// outbox in batches). Precision comes from the in-memory last stretch, not
// from the TTLs, so a wide margin costs nothing but prefetch room.
//
// Dead-lettering is at-least-once (x-dead-letter-strategy at-least-once,
// which RabbitMQ applies only together with x-overflow reject-publish): an
// expired message leaves its tier only once ns.due has it. The router, the
// due queue and its binding are declared before anything is published (a
// dead-letter target that does not exist makes the broker retry only every
// 3 minutes); each tier is declared before its first publish, so a
// namespace holds only the tiers its delays use.
//
// With the rabbitmq_delayed_message_exchange plugin (detected at start-up by
// declaring an x-delayed-message exchange on a throwaway connection) a timer
// at least the last stretch away is instead published once to ns.delayed
// with x-delay = d - margin, and the plugin routes it to ns.due.delayed with
// the margin left; the consumer is the same and holds the last stretch in
// memory as in tier mode. ns.due.delayed is a classic queue: at boot the
// plugin fires the timers that fell due while the broker was down, without
// confirms, and a quorum queue without a leader yet would drop them. The
// plugin keeps delayed messages on one node only, outside quorum queues.
//
// # Guarantees
//
// Delivery is at-least-once: a delivery is acknowledged only after Deliver
// returned nil; a failed Deliver is nacked back to the queue and the consumer
// waits a capped exponential backoff before delivering again; a consumer
// that dies hands its unacknowledged deliveries back to the broker. A timer
// is never delivered before its deadline: the consumer compares it with the
// clock. Duplicates happen (a publish retried after a lost confirm, a
// delivery whose ack was lost) and are absorbed by the close's
// compare-and-set. Timers cannot be cancelled; a stale one fires into a
// no-op close.
//
// # Failures
//
// New fails with one line saying what to fix (bad URL, unreachable, login or
// vhost refused, missing permissions, a queue declared with other
// arguments). A lost connection makes Run return an error (the engine
// restarts it with backoff); Schedule reconnects on its next call and fails
// fast while the broker is away. Timers stay in the broker's quorum queues
// through a broker restart.
package rabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass"
)

// Defaults of Config.
const (
	URLDefault            = "amqp://guest:guest@127.0.0.1:5672/"
	NamespaceDefault      = "hourglass"
	PrefetchDefault       = 20000
	DeliverBatchDefault   = 1000
	MarginDefault         = time.Second
	RetryMaxDefault       = 5 * time.Second
	DialTimeoutDefault    = 5 * time.Second
	PublishTimeoutDefault = 30 * time.Second
)

// Mode selects how messages are delayed.
type Mode int

const (
	// ModeAuto uses the delayed-message exchange if the broker has the
	// plugin, else the tier queues.
	ModeAuto Mode = iota
	// ModeTiers uses TTL tier queues and dead-lettering, whatever plugins
	// the broker has.
	ModeTiers
	// ModeDelayedExchange requires the rabbitmq_delayed_message_exchange
	// plugin; New fails without it.
	ModeDelayedExchange
)

// String returns the mode's name: auto, tiers or delayed-exchange.
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeTiers:
		return "tiers"
	case ModeDelayedExchange:
		return "delayed-exchange"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Config configures a Scheduler; the zero value of each field means its
// default.
type Config struct {
	// URL is the broker, amqp[s]://user:password@host:port/vhost.
	URL string
	// Namespace prefixes every queue and exchange (ns.due, ns.router,
	// ns.tier.*, ns.delayed): processes with the same namespace share
	// timers; different namespaces never see each other's.
	Namespace string
	// Mode picks tier queues or the delayed-message plugin (ModeAuto:
	// the plugin if the broker has it).
	Mode Mode
	// Prefetch is the most unacknowledged deliveries (messages) a consumer
	// holds (1..65535); a message carries one timer or up to 256 scheduled
	// together, so it bounds the timers waited out in memory at Prefetch
	// times 256 (about 50 bytes each). When more messages than this are due
	// within the last stretch (1 s + Margin), the rest wait in the queue
	// until some are delivered, and may be late.
	Prefetch int
	// DeliverBatch is the most timers per Deliver call.
	DeliverBatch int
	// Margin is the least time a timer has left when it comes out of a
	// tier: a timer goes to a tier only if it leaves at least Margin before
	// the deadline (1 ms..1 min). Larger tolerates more dead-lettering lag
	// in bursts; the consumer holds the last stretch (up to 1 s + Margin)
	// in memory.
	Margin time.Duration
	// RetryMax caps the backoff after a failed Deliver.
	RetryMax time.Duration
	// DialTimeout bounds connecting, handshake included.
	DialTimeout time.Duration
	// PublishTimeout bounds one Schedule call's publishes and confirms.
	PublishTimeout time.Duration
	Clock          hourglass.Clock
	Logger         *slog.Logger
}

// maxNamespace leaves room for the longest suffix (".tier.524288s") within
// RabbitMQ's 255-byte names.
const maxNamespace = 200

// Validate reports a configuration error, naming the field and its range.
// It is safe to call on the zero value.
func (c Config) Validate() error {
	check := func(name string, d, lo, hi time.Duration) error {
		if d != 0 && (d < lo || d > hi) {
			return fmt.Errorf("rabbitmq: %s must be between %s and %s, got %s", name, lo, hi, d)
		}
		return nil
	}
	if c.Prefetch < 0 || c.Prefetch > 65535 {
		return fmt.Errorf("rabbitmq: Prefetch must be between 1 and 65535, got %d", c.Prefetch)
	}
	if c.DeliverBatch < 0 || c.DeliverBatch > 100_000 {
		return fmt.Errorf("rabbitmq: DeliverBatch must be between 1 and 100000, got %d", c.DeliverBatch)
	}
	if len(c.Namespace) > maxNamespace {
		return fmt.Errorf("rabbitmq: Namespace must be at most %d bytes, got %d", maxNamespace, len(c.Namespace))
	}
	if c.Mode < ModeAuto || c.Mode > ModeDelayedExchange {
		return fmt.Errorf("rabbitmq: unknown Mode %d", int(c.Mode))
	}
	return errors.Join(
		check("Margin", c.Margin, time.Millisecond, time.Minute),
		check("RetryMax", c.RetryMax, time.Millisecond, time.Hour),
		check("DialTimeout", c.DialTimeout, 10*time.Millisecond, 5*time.Minute),
		check("PublishTimeout", c.PublishTimeout, 10*time.Millisecond, time.Hour),
	)
}

func (c Config) withDefaults() Config {
	c.URL = cmp.Or(c.URL, URLDefault)
	c.Namespace = cmp.Or(c.Namespace, NamespaceDefault)
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	c.DeliverBatch = cmp.Or(c.DeliverBatch, DeliverBatchDefault)
	c.Margin = cmp.Or(c.Margin, MarginDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	if c.Clock == nil {
		c.Clock = hourglass.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Scheduler is the RabbitMQ delay mechanism. Safe for concurrent use;
// Schedule calls are serialised on one publishing channel.
type Scheduler struct {
	cfg  Config
	uri  amqp.URI
	topo topology
	log  *slog.Logger

	consumers atomic.Int64 // numbers consumer tags
	// owned is the mask of the partitions whose due queues this process
	// reads (hourglass.Parts.Mask; -1: every partition); reowned tells the
	// running consumer it changed.
	owned   atomic.Int64
	reowned chan struct{}
	// partsDeclared: the partitions' due queues were declared, and no
	// Run failed since.
	partsDeclared atomic.Bool

	mu     sync.Mutex // guards the publishing connection
	conn   *amqp.Connection
	pub    *publisher
	closed bool
}

var (
	_ hourglass.Scheduler   = (*Scheduler)(nil)
	_ hourglass.Partitioned = (*Scheduler)(nil)
)

// Own implements hourglass.Partitioned: from now on this process reads the
// due queues of parts only (nil: every partition), and sends the timers of
// other partitions it holds to their partitions' queues. It does not
// block; safe for concurrent use, idempotent.
func (s *Scheduler) Own(parts hourglass.Parts) {
	s.owned.Store(parts.Mask())
	select {
	case s.reowned <- struct{}{}:
	default:
	}
}

// owns reports whether this process reads the due queue of id's partition.
func (s *Scheduler) owns(id int64) bool {
	return s.owned.Load()>>hourglass.PartitionOf(id)&1 == 1
}

// New connects to the broker, picks the mode, and declares the namespace's
// queues and exchanges (idempotently: several processes may do it at once).
// It fails with a one-line error saying what to fix: a bad URL, an
// unreachable broker, a refused login or vhost, missing permissions, a queue
// that exists with other arguments, or (ModeDelayedExchange) a missing
// plugin.
func New(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	uri, err := parseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	s := &Scheduler{cfg: cfg, uri: uri, log: cfg.Logger, reowned: make(chan struct{}, 1)}
	s.owned.Store(-1)
	plugin := false
	if cfg.Mode != ModeTiers {
		if plugin, err = s.probePlugin(ctx); err != nil {
			return nil, fmt.Errorf("rabbitmq: %w", err)
		}
		if !plugin && cfg.Mode == ModeDelayedExchange {
			return nil, fmt.Errorf("rabbitmq: the broker at %s has no x-delayed-message exchange type: enable the rabbitmq_delayed_message_exchange plugin or use the tier queues (ModeTiers)", address(uri))
		}
	}
	s.topo = newTopology(cfg.Namespace, cfg.Margin, plugin)
	if err := s.connectLocked(ctx); err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	if err := s.checkAccess(ctx); err != nil {
		s.dropLocked()
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	mode := "tier queues"
	if plugin {
		mode = "delayed-message exchange"
	}
	s.log.Info("rabbitmq: ready", "broker", address(uri), "vhost", uri.Vhost, "namespace", cfg.Namespace, "mode", mode)
	return s, nil
}

// probePlugin reports whether the broker knows the x-delayed-message
// exchange type, by declaring the namespace's delayed exchange. An unknown
// exchange type closes the whole connection, so it uses a throwaway one.
func (s *Scheduler) probePlugin(ctx context.Context) (bool, error) {
	conn, err := s.dial(ctx, "probe")
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	name := s.cfg.Namespace + ".delayed"
	err = ch.ExchangeDeclare(name, delayedExchangeType, true, false, false, false, delayedArgs)
	var ae *amqp.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ae) && ae.Code == amqp.CommandInvalid:
		return false, nil // "unknown exchange type 'x-delayed-message'"
	}
	return false, explainDeclare("exchange", name, err)
}

// checkAccess checks, without side effects, the permissions declaring did
// not: reading the due queue (a consumer with prefetch 1, cancelled at once;
// a message it may have taken goes back to the queue) and writing to the
// default exchange, through which timers are published (an empty message
// to a queue that does not exist, which the broker returns unroutable).
func (s *Scheduler) checkAccess(ctx context.Context) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Qos(1, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	tag := fmt.Sprintf("hourglass-check-%d", os.Getpid())
	if _, err := ch.Consume(s.topo.due, tag, false, false, false, false, nil); err != nil {
		return explainAccess("consume from queue", s.topo.due, err)
	}
	if err := ch.Cancel(tag, false); err != nil {
		return fmt.Errorf("cancel the access check's consumer: %w", err)
	}
	// Both modes publish timers within the last stretch through the
	// default exchange; plugin mode publishes the others to the delayed
	// exchange. Each check publishes an empty message with a routing key
	// nothing is bound to: the broker drops it (the default exchange
	// returns it as unroutable).
	if err := s.checkPublish(ctx, "", "publish to the default exchange (amq.default)"); err != nil {
		return err
	}
	if s.topo.plugin {
		return s.checkPublish(ctx, s.topo.delayed, "publish to exchange "+s.topo.delayed)
	}
	return nil
}

// checkPublish publishes an empty message to exchange with a routing key
// nothing is bound to, and returns the refusal explained, if any. A refusal
// closes the publishing channel: the caller then drops the connection.
func (s *Scheduler) checkPublish(ctx context.Context, exchange, what string) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	probe := s.cfg.Namespace + ".access-check"
	dc, err := s.pub.ch.PublishWithDeferredConfirmWithContext(pctx, exchange, probe, exchange == "", false, amqp.Publishing{})
	if err == nil {
		_, err = dc.WaitContext(pctx)
	}
	if err == nil && s.pub.ch.IsClosed() {
		err = s.pub.closeReason()
	}
	drainReturns(s.pub.returns) // the expected NO_ROUTE
	if err != nil {
		return explainAccess(what, "", err)
	}
	return nil
}

// connectLocked opens the publishing connection, declares the topology on
// it (every time: a broker that lost its definitions gets them back) and
// opens the confirm-mode channel. s.mu must be held, or s not yet shared.
func (s *Scheduler) connectLocked(ctx context.Context) error {
	conn, err := s.dial(ctx, "publisher")
	if err != nil {
		return err
	}
	if err := s.declare(conn, "publisher"); err != nil {
		conn.Close()
		return err
	}
	pub, err := newPublisher(conn, s.topo, s.cfg.Clock)
	if err != nil {
		conn.Close()
		return err
	}
	s.conn, s.pub = conn, pub
	return nil
}

// declare declares the topology on a channel of its own, closed afterwards
// (a failed declare closes the channel anyway). A consumer's connection
// leaves out the partitions' due queues once they were declared (by the
// publisher's connection, or an earlier Run) and no Run failed since:
// their 64 round trips delayed the start of consuming by up to seconds.
func (s *Scheduler) declare(conn *amqp.Connection, role string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if err := s.topo.declare(ch); err != nil {
		return err
	}
	if s.partsDeclared.Load() && role == "consumer" {
		return nil
	}
	if err := s.topo.declareParts(conn); err != nil {
		return err
	}
	s.partsDeclared.Store(true)
	return nil
}

func (s *Scheduler) dropLocked() {
	if s.conn != nil {
		s.conn.Close()
	}
	s.conn, s.pub = nil, nil
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "rabbitmq", Feed: hourglass.FeedOutbox, Durable: true}
}

// ErrClosed is returned by Schedule and Run after Close.
var ErrClosed = errors.New("rabbitmq: scheduler closed")

// Schedule implements hourglass.Scheduler: it publishes the timers
// persistently and returns nil once the broker confirmed all of them. On a
// nack, an unroutable publish, a lost connection or PublishTimeout it returns
// an error and drops the connection; the next call reconnects (and
// redeclares the topology), so a retry after a broker restart succeeds as
// soon as the broker is back, and fails fast (connection refused) while it
// is away. Some timers of a failed call may have been published: retrying
// duplicates them, which the close absorbs. Calls are serialised.
func (s *Scheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	if len(timers) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.pub != nil && (s.conn.IsClosed() || s.pub.broken()) {
		s.dropLocked()
	}
	if s.pub == nil {
		if err := s.connectLocked(ctx); err != nil {
			return fmt.Errorf("rabbitmq: schedule: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	if err := s.pub.publish(ctx, timers); err != nil {
		s.dropLocked()
		return fmt.Errorf("rabbitmq: schedule %d timers: %w", len(timers), err)
	}
	return nil
}

// Close implements hourglass.Scheduler: it closes the publishing connection.
// Idempotent; Schedule and Run fail with ErrClosed afterwards.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.dropLocked()
	return nil
}

// Destroy deletes the namespace's queues and exchanges, in both modes, with
// every timer in them: for tests and for retiring a namespace. It opens a
// connection of its own, so it works before or after Close. Idempotent.
// Other processes consuming the namespace lose their consumer (their Run
// returns an error) and recreate the topology when they reconnect.
func (s *Scheduler) Destroy(ctx context.Context) error {
	conn, err := s.dial(ctx, "admin")
	if err != nil {
		return fmt.Errorf("rabbitmq: destroy: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: destroy: open channel: %w", err)
	}
	if err := deleteAll(ch, s.cfg.Namespace); err != nil {
		return fmt.Errorf("rabbitmq: destroy: %w", err)
	}
	return nil
}
