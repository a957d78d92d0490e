// Package kafka is a delay mechanism on Kafka: order deadlines are records in
// a ladder of delay topics, each tier holding its records for a fixed time,
// each partition consumed by the process that owns it, which releases its
// records in order.
//
// # How a timer travels
//
// The tiers are the topics "<namespace>.timers.<tier>" for the tiers 10h,
// 1h, 10m, 1m, 10s, 1s (coarse) and due (finest). A record written to a coarse
// tier at time t is released at t + the tier's hold; because every record of
// a tier has the same hold, each partition releases its records in the order
// they were written, so its consumer only waits for the head of the
// partition: it keeps the records it fetched in memory, pauses fetching the
// partition (kgo's PauseFetchPartitions) while the newest one is more than a
// second away, and at each release forwards the record to the tier that
// matches what is left of its delay. Schedule writes each timer the same
// way: to the coarsest tier whose hold plus 250 ms fits in the remaining
// delay. A record reaches the finest tier with less than about 1.25 s to go;
// that consumer keeps what it fetched in a heap by deadline and hands the
// due timers (deadline <= now, to the millisecond) to Deliver in batches.
//
// An order created at 12:00:00.000 with a 25-minute timeout and relayed 20 ms
// later is written to the 10m tier (24m59.98s to go), forwarded at 12:10 to
// the 10m tier again, at 12:20 to the 1m tier, four times, then five times
// through the 10s tier and nine times through the 1s tier, and reaches the
// due tier with 0.98 s to go, where it fires at 12:25:00.000: 20 hops. Each
// hop is one produce and one offset commit; a timer takes about as many hops
// as the digits of its delay written in the tiers' units add up to (51 for
// the longest timeout, 7 days), and the broker stores it once per hop until
// retention deletes the old copies.
//
// Timers of one hourglass partition written together to the same tier
// travel packed, up to 256 in one record (in a coarse tier they share its
// release time): a tier's cost is
// per record, so a flash sale's timers, relayed from the outbox up to 1,000
// at a time, take a few hundred records through the tiers instead of one
// each. The consumer holds each timer of a record on its own and treats the
// record as done (its offset committable) once all of them were forwarded or
// delivered. A record of one timer keeps the original text form, which a
// process of an older version reads; a packed one ("v2 …") it skips, and the
// sweeper closes its orders late: upgrade every process of a namespace before
// one writes.
//
// # Several processes
//
// Every tier's topic has one partition per hourglass partition (64,
// hourglass.Partitions), every record is written to the partition of its
// orders (hourglass.PartitionOf), and each process consumes exactly the
// partitions it owns in every tier (Own, told by the engine from the
// node's leases), assigned directly, with no consumer group: the records
// of a partition follow its lease. A process that loses a partition stops
// forwarding and delivering its timers at once and forgets what it
// fetched; the new owner reads the partition from its committed offset
// (each tier's offsets are committed, after every forward or delivery, to
// the group "<topic>.group", which has no members), so every timer is
// forwarded and delivered by its partition's owner, at least once, none is
// dropped for lack of an owner, and a node that dies holds up its
// partitions for its lease TTL, not for a group's session timeout.
//
// Versions before ownership used the topics "<namespace>.delay.<tier>",
// partitioned freely and shared by a consumer group per tier. Open looks
// for them and Run drains those that exist: their records are forwarded at
// once to the tier their remaining delay calls for, so timers written by
// an older process still fire (late by at most a forward) after an
// upgrade.
//
// # Guarantees
//
// Every write (Schedule and each forward) waits for acks=all. A consumer
// commits a record's offset only after its forward was acknowledged or
// Deliver returned nil, and only up to the first record not yet done, so a
// consumer that dies or loses its partitions leaves its uncommitted records
// to the next owner: delivery is at-least-once, and a record forwarded twice
// or delivered twice only causes a no-op close. Nothing is delivered before
// its deadline by the clock of the process delivering it. Timers cannot be
// cancelled: a paid order's timer fires into a no-op close.
//
// Each tier has its own consumer, so a slow delivery never holds up the
// forwarding in the coarse tiers. Run returns an error when the brokers stop answering (a
// ping every second, or a produce or commit that fails) and the engine
// restarts it; the consumers stay in their groups between Runs, through a
// broker restart, and go on with the records they hold.
package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
)

// Defaults of Config.
const (
	NamespaceDefault      = "hourglass"
	PartitionsDefault     = 8
	RetentionDefault      = 7 * 24 * time.Hour
	TimeoutDefault        = 10 * time.Second
	SessionTimeoutDefault = 10 * time.Second
	FetchMaxWaitDefault   = 100 * time.Millisecond
	DeliverBatchDefault   = 512
	RetryMaxDefault       = 5 * time.Second
	PingIntervalDefault   = time.Second
)

// Config configures a Scheduler; the zero value of each field means its
// default.
type Config struct {
	// URL lists the seed brokers: kafka://host:port[,host:port…] (a host
	// without a port means port 9092).
	URL string
	// Namespace prefixes every topic and consumer group (default
	// "hourglass"): letters, digits, '.', '_' and '-', at most 200 bytes.
	Namespace string
	// Partitions is ignored: every topic has hourglass.Partitions
	// partitions, one per hourglass partition (Open refuses a topic that
	// has another count). It was the partition count of the topics of
	// versions before ownership and is kept so that their configurations
	// still compile.
	Partitions int32
	// ReplicationFactor is used when Open creates the topics; 0 means the
	// broker's default.
	ReplicationFactor int16
	// Retention is the retention.ms of the topics Open creates (default 7
	// days, at least 1 day): a record must outlive its tier's hold (10 h at
	// most) plus any time the consumers are down.
	Retention time.Duration
	// Timeout bounds start-up, each produce and each commit (default 10 s).
	Timeout time.Duration
	// SessionTimeout is how long a consumer that died silently keeps its
	// partitions (default 10 s); the broker must allow it
	// (group.min.session.timeout.ms is 6 s by default).
	SessionTimeout time.Duration
	// FetchMaxWait bounds how long a resumed partition waits for a fetch
	// already in flight (default 100 ms).
	FetchMaxWait time.Duration
	// DeliverBatch is the most timers per Deliver call (default 512).
	DeliverBatch int
	// RetryMax caps the backoff after a failed Deliver (default 5 s).
	RetryMax time.Duration
	// PingInterval is how often Run checks that a broker answers (default
	// 1 s).
	PingInterval time.Duration
	Clock        hourglass.Clock
	Logger       *slog.Logger
}

var namespaceChars = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// Validate reports a configuration error, naming the field and its range.
func (c Config) Validate() error {
	if _, err := parseURL(c.URL); err != nil {
		return err
	}
	if ns := c.Namespace; ns != "" && (len(ns) > 200 || !namespaceChars.MatchString(ns)) {
		return fmt.Errorf("kafka: Namespace %q: want 1 to 200 letters, digits, '.', '_' or '-'", ns)
	}
	check := func(name string, d, lo, hi time.Duration) error {
		if d != 0 && (d < lo || d > hi) {
			return fmt.Errorf("kafka: %s must be between %s and %s, got %s", name, lo, hi, d)
		}
		return nil
	}
	for _, err := range []error{
		check("Retention", c.Retention, 24*time.Hour, 365*24*time.Hour),
		check("Timeout", c.Timeout, 100*time.Millisecond, 5*time.Minute),
		check("SessionTimeout", c.SessionTimeout, time.Second, 30*time.Minute),
		check("FetchMaxWait", c.FetchMaxWait, time.Millisecond, 30*time.Second),
		check("RetryMax", c.RetryMax, time.Millisecond, time.Hour),
		check("PingInterval", c.PingInterval, 10*time.Millisecond, time.Hour),
	} {
		if err != nil {
			return err
		}
	}
	if c.Partitions < 0 || c.Partitions > 10000 {
		return fmt.Errorf("kafka: Partitions must be between 1 and 10000, got %d", c.Partitions)
	}
	if c.ReplicationFactor < 0 {
		return fmt.Errorf("kafka: ReplicationFactor must be >= 1 (0: the broker's default), got %d", c.ReplicationFactor)
	}
	if c.DeliverBatch < 0 {
		return fmt.Errorf("kafka: DeliverBatch must be >= 1, got %d", c.DeliverBatch)
	}
	return nil
}

// parseURL returns the seed brokers of kafka://host:port[,host:port…].
func parseURL(raw string) ([]string, error) {
	bad := func(why string) error {
		return fmt.Errorf("kafka: URL %q: %s; want kafka://host:port[,host:port…]", redact.URL(raw), why)
	}
	rest, ok := strings.CutPrefix(raw, "kafka://")
	if !ok {
		return nil, bad("the scheme must be kafka://")
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return nil, bad("no broker")
	}
	if strings.ContainsAny(rest, "/?#@ ") {
		return nil, bad("only brokers may follow kafka://")
	}
	var seeds []string
	for hp := range strings.SplitSeq(rest, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil { // no port: the standard one
			if host, port, err = net.SplitHostPort(hp + ":9092"); err != nil {
				return nil, bad(fmt.Sprintf("broker %q is not host:port", hp))
			}
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, bad(fmt.Sprintf("broker %q: port must be 1-65535", hp))
		}
		if host == "" {
			return nil, bad(fmt.Sprintf("broker %q has no host", hp))
		}
		seeds = append(seeds, net.JoinHostPort(host, port))
	}
	return seeds, nil
}

// Topics returns the delay topics of namespace, finest tier first, each
// with hourglass.Partitions partitions. Each tier's committed offsets are
// kept by a group named after its topic with ".group" appended, which no
// consumer joins (partitions are assigned by ownership). It is what an
// operator pre-creates when hourglass may not create topics.
func Topics(namespace string) []string { return topics(namespace, topicInfix) }

// topics returns the topics of the tiers, finest first, named
// "<namespace><infix><tier>".
func topics(namespace, infix string) []string {
	namespace = cmp.Or(namespace, NamespaceDefault)
	ts := tiers()
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = namespace + infix + t.name
	}
	return out
}

// Groups returns the consumer groups of namespace, in the order of Topics.
func Groups(namespace string) []string {
	out := Topics(namespace)
	for i := range out {
		out[i] += ".group"
	}
	return out
}

// Scheduler is the Kafka delay mechanism. Schedule, Info and Close are safe
// for concurrent use; Run may run once at a time per Scheduler (several
// Schedulers, in one process or many, share the work of one namespace).
type Scheduler struct {
	cfg      Config
	seeds    []string
	clock    hourglass.Clock
	log      *slog.Logger
	tiers    []tier
	topics   []string
	producer *kgo.Client // produces, pings and administers; consumers have their own

	// runMu is held by Run, and by Close. The consumers are created by the
	// first Run and kept until Close: their group memberships outlive a
	// failed Run and a broker restart, so a Run restarted by the engine
	// picks up its partitions at once instead of waiting for its old
	// members' session timeout.
	runMu     sync.Mutex
	consumers []*consumer
	closed    bool

	// legacy lists the topics of older versions that Open found (tier
	// index to topic): Run drains them.
	legacy map[int]string

	// ownMu guards owned, the partitions this process consumes in every
	// tier (nil: all of them), set by Own, and ownChanged, closed (and
	// replaced) at each change to wake the consumers.
	ownMu      sync.Mutex
	owned      hourglass.Parts
	ownChanged chan struct{}
}

var (
	_ hourglass.Scheduler   = (*Scheduler)(nil)
	_ hourglass.Partitioned = (*Scheduler)(nil)
)

// Open connects to the brokers, checks that one answers within
// Config.Timeout, and creates the delay topics that do not exist yet. It
// returns a one-line error saying what to fix: a bad URL, no broker
// reachable, or topics it may not create or describe.
func Open(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seeds, _ := parseURL(cfg.URL)
	cfg.Namespace = cmp.Or(cfg.Namespace, NamespaceDefault)
	cfg.Partitions = cmp.Or(cfg.Partitions, PartitionsDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	cfg.SessionTimeout = cmp.Or(cfg.SessionTimeout, SessionTimeoutDefault)
	cfg.FetchMaxWait = cmp.Or(cfg.FetchMaxWait, FetchMaxWaitDefault)
	cfg.DeliverBatch = cmp.Or(cfg.DeliverBatch, DeliverBatchDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	cfg.PingInterval = cmp.Or(cfg.PingInterval, PingIntervalDefault)
	s := &Scheduler{cfg: cfg, seeds: seeds, clock: cfg.Clock, log: cfg.Logger, tiers: tiers(), topics: Topics(cfg.Namespace), ownChanged: make(chan struct{})}
	if s.clock == nil {
		s.clock = hourglass.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	producer, err := kgo.NewClient(append(s.clientOpts(),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Duplicates are harmless (a second close is a no-op) and without
		// idempotence a produce can be abandoned at its timeout.
		kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(0),
		// Every record names its partition: its orders' hourglass
		// partition.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(cfg.Timeout),
		kgo.ProduceRequestTimeout(cfg.Timeout),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client: %w", err)
	}
	s.producer = producer
	openCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := producer.Ping(openCtx); err != nil {
		producer.Close()
		return nil, fmt.Errorf("kafka: no Kafka broker reachable at %s: %w", strings.Join(seeds, ","), err)
	}
	if err := s.ensureTopics(openCtx); err != nil {
		producer.Close()
		return nil, err
	}
	return s, nil
}

// clientOpts are the options every client of s shares.
func (s *Scheduler) clientOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(s.seeds...),
		kgo.DialTimeout(min(s.cfg.Timeout, 5*time.Second)),
		kgo.RetryTimeout(s.cfg.Timeout),
		kgo.RequestTimeoutOverhead(s.cfg.Timeout),
		kgo.WithLogger(kgoLogger{s.log}),
	}
}

// ensureTopics creates the delay topics that are missing, checks that all
// of them exist with one partition per hourglass partition, and notes the
// topics of older versions that exist, for Run to drain.
func (s *Scheduler) ensureTopics(ctx context.Context) error {
	adm := kadm.NewClient(s.producer)
	legacy := topics(s.cfg.Namespace, legacyInfix)
	listed, err := adm.ListTopics(ctx, append(slices.Clone(s.topics), legacy...)...)
	if err != nil {
		return fmt.Errorf("kafka: describe topics %s: %w", strings.Join(s.topics, ", "), err)
	}
	for i, t := range legacy {
		if d, ok := listed[t]; ok && d.Err == nil && len(d.Partitions) > 0 {
			if s.legacy == nil {
				s.legacy = map[int]string{}
			}
			s.legacy[i] = t
		}
	}
	var missing []string
	for _, t := range s.topics {
		d, ok := listed[t]
		switch {
		case ok && d.Err == nil && len(d.Partitions) != hourglass.Partitions:
			return fmt.Errorf("kafka: topic %s has %d partitions, want %d (one per hourglass partition): delete it so that hourglass creates it, or create it with %d partitions",
				t, len(d.Partitions), hourglass.Partitions, hourglass.Partitions)
		case ok && d.Err == nil && len(d.Partitions) > 0:
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case errors.Is(d.Err, kerr.TopicAuthorizationFailed):
			return fmt.Errorf("kafka: not authorized to describe topic %s: grant DESCRIBE, READ and WRITE on the topics %s.delay.*", t, s.cfg.Namespace)
		default:
			return fmt.Errorf("kafka: describe topic %s: %w", t, cmp.Or(d.Err, errors.New("no partitions")))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	retention := strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10)
	rf := s.cfg.ReplicationFactor
	if rf == 0 {
		rf = -1 // the broker's default.replication.factor
	}
	created, err := adm.CreateTopics(ctx, hourglass.Partitions, rf, map[string]*string{"retention.ms": &retention}, missing...)
	if err != nil {
		return fmt.Errorf("kafka: create topics %s: %w", strings.Join(missing, ", "), err)
	}
	for _, t := range missing {
		r, ok := created[t]
		switch {
		case !ok:
			return fmt.Errorf("kafka: create topic %s: the broker did not answer for it", t)
		case r.Err == nil, errors.Is(r.Err, kerr.TopicAlreadyExists):
		case errors.Is(r.Err, kerr.TopicAuthorizationFailed), errors.Is(r.Err, kerr.ClusterAuthorizationFailed):
			return fmt.Errorf("kafka: not authorized to create topic %s: create the topics %s yourself or grant CREATE", t, strings.Join(missing, ", "))
		default:
			return fmt.Errorf("kafka: create topic %s: %w", t, r.Err)
		}
	}
	return nil
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "kafka", Feed: hourglass.FeedOutbox, Durable: true}
}

// Schedule implements hourglass.Scheduler: it writes each timer to the tier
// matching its remaining delay and returns once every write was
// acknowledged by all in-sync replicas, or an error (after at most
// Config.Timeout) if any was not; some of the timers may have been written
// then, and writing them again only makes duplicates. Safe for concurrent
// use.
func (s *Scheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	if len(timers) == 0 {
		return nil
	}
	now := s.clock.Now()
	vs := make([]timerValue, len(timers))
	for i, t := range timers {
		vs[i] = timerValue{OrderID: t.ID, Deadline: hourglass.UnixMilli(t.At)}
	}
	if err := s.produce(ctx, s.records(vs, now)); err != nil {
		return fmt.Errorf("kafka: publish %d timers: %w", len(timers), err)
	}
	return nil
}

// records returns the delay records of timers (their Release is set here),
// each written to the tier its remaining delay at now calls for, to its
// orders' hourglass partition: the timers that go to the same tier and
// partition travel packed (in a coarse tier they share the release, now
// plus its hold), up to packMax a record. A record's key is its first
// timer's order id.
func (s *Scheduler) records(vs []timerValue, now time.Time) []*kgo.Record {
	type dest struct{ tier, part int }
	groups := map[dest][]timerValue{}
	var order []dest // first seen first: the output does not depend on map order
	for _, v := range vs {
		i := route(s.tiers, hourglass.FromUnixMilli(v.Deadline).Sub(now))
		v.Release = v.Deadline
		if i > 0 {
			v.Release = hourglass.UnixMilli(now.Add(s.tiers[i].hold))
		}
		d := dest{i, hourglass.PartitionOf(v.OrderID)}
		if _, ok := groups[d]; !ok {
			order = append(order, d)
		}
		groups[d] = append(groups[d], v)
	}
	var recs []*kgo.Record
	for _, d := range order {
		group := groups[d]
		for start := 0; start < len(group); start += packMax {
			pack := group[start:min(start+packMax, len(group))]
			recs = append(recs, &kgo.Record{Topic: s.topics[d.tier], Partition: int32(d.part), Key: strconv.AppendInt(nil, pack[0].OrderID, 10), Value: encodeTimers(pack)})
		}
	}
	return recs
}

// Own implements hourglass.Partitioned: from now on the consumers read
// only the partitions of parts (nil: all of them) in every tier. It
// returns at once; each consumer applies the change before its next
// forward or delivery and reads a partition gained from its committed
// offset.
func (s *Scheduler) Own(parts hourglass.Parts) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	s.owned = slices.Clone(parts)
	close(s.ownChanged)
	s.ownChanged = make(chan struct{})
}

// ownedParts returns the partitions this process owns (all of them until
// Own was called) and a channel closed at the next change.
func (s *Scheduler) ownedParts() (hourglass.Parts, <-chan struct{}) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	return s.owned, s.ownChanged
}

// produce writes recs and waits for all acks, at most Config.Timeout.
func (s *Scheduler) produce(ctx context.Context, recs []*kgo.Record) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	return s.producer.ProduceSync(ctx, recs...).FirstErr()
}

// Run implements hourglass.Scheduler: it runs one consumer per tier until
// ctx ends (then returns nil) or until one fails or the brokers stop
// answering a ping (then it returns the error). The consumers stay in their
// groups between Runs, keeping what they hold, so the next Run goes on where
// this one stopped; the records they did not commit are consumed again by
// another process if this one dies. Only one Run per Scheduler at a time: a
// second one returns an error at once.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	if !s.runMu.TryLock() {
		return errors.New("kafka: Run is already running on this scheduler")
	}
	defer s.runMu.Unlock()
	if s.closed {
		return errors.New("kafka: Run after Close")
	}
	if err := s.ping(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if s.consumers == nil {
		for i := range s.tiers {
			c, err := s.newConsumer(s.tiers[i], s.topics[i], false)
			if err != nil {
				s.closeConsumers()
				return err
			}
			s.consumers = append(s.consumers, c)
		}
		for i, topic := range s.legacy {
			c, err := s.newConsumer(s.tiers[i], topic, true)
			if err != nil {
				s.closeConsumers()
				return err
			}
			s.consumers = append(s.consumers, c)
		}
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, c := range s.consumers {
		c.deliver = deliver
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.run(runCtx); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.watch(runCtx); err != nil {
			cancel(err)
		}
	}()
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return cmp.Or(context.Cause(runCtx), errors.New("kafka: consumers stopped"))
}

// watch pings the brokers every PingInterval until ctx ends.
func (s *Scheduler) watch(ctx context.Context) error {
	t := time.NewTicker(s.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.ping(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

func (s *Scheduler) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(s.cfg.Timeout, 2*s.cfg.PingInterval))
	defer cancel()
	if err := s.producer.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: no Kafka broker answers at %s: %w", strings.Join(s.seeds, ","), err)
	}
	return nil
}

// Close implements hourglass.Scheduler: the consumers leave their groups
// (waiting at most Config.Timeout each when the brokers are gone), so that
// other processes take their partitions at once, and the clients close. It
// waits for Run to return. Idempotent; it never fails.
func (s *Scheduler) Close() error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.closeConsumers()
	s.producer.Close()
	return nil
}

// closeConsumers closes the consumers concurrently. runMu is held.
func (s *Scheduler) closeConsumers() {
	var wg sync.WaitGroup
	for _, c := range s.consumers {
		wg.Go(c.close)
	}
	wg.Wait()
	s.consumers = nil
}

// kgoLogger passes the client's errors to slog as warnings and its
// warnings as debug messages: the client retries on its own and warns at
// every failed dial, several times a second per client during an outage,
// which Run already reports as one error.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level == kgo.LogLevelError {
		l.log.Warn("kafka client: "+msg, keyvals...)
		return
	}
	l.log.Debug("kafka client: "+msg, keyvals...)
}
