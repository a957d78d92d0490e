// Package rediskeyspace is the Redis key-expiry listener: the delay
// mechanism as it is often described (one key per order with a TTL, and a
// subscriber to Redis's "expired" events), kept that way so its weaknesses
// can be measured. Prefer package redis (a sorted set with leases) for
// production.
//
// # How it works
//
// Schedule writes, for each timer, the key <ns>:order:<id>:<deadlineMs>
// with a TTL of the time left until the deadline (SET … PX). The deadline
// is in the key's name because an expired event carries only the key, not
// its value. A timer already due is handed to the local dispatcher at once
// (Redis cannot expire a key in the past). The order id is also added to
// the sorted set <ns>:index scored by its deadline, so that Cancel, which
// knows only order ids, can find the key to DEL.
//
// Run makes sure notify-keyspace-events includes "Ex" (CONFIG SET; a Redis
// restart forgets it, so every Run applies it again), subscribes to
// __keyevent@<db>__:expired, parses the order id and deadline out of every
// expired key under the namespace and pushes the timer to a dispatcher
// (package dispatch): a few workers that deliver in batches and retry a
// failed delivery in-process with backoff.
//
// # Weaknesses (measured in the README)
//
//   - Late: Redis expires keys when they are touched or when its active
//     expiry cycle (hz times per second, sampling 20 keys with a TTL at a
//     time) finds them, and only then publishes the event. Lateness is tens
//     to hundreds of milliseconds, more with many keys or a busy server.
//   - Fire and forget: pub/sub has no acknowledgement and no backlog. An
//     event published while no subscriber is connected (a network blip, a
//     restart of this process, Run backing off after an error) is lost for
//     good, and so is an event received but not yet delivered when this
//     process dies. Only the engine's sweeper closes those orders, late.
//     Durable is therefore false.
//   - Everyone hears everything: every subscriber receives every expired
//     event of the database, and each filters out other namespaces' keys
//     and, on several nodes, the timers of the partitions it does not own
//     (Own), which their owner delivers; so each node delivers only its
//     own. A timer already due when scheduled by a node that does not own
//     it is written with a 1 ms TTL, for its owner to hear it expire.
//     Events heard by the old owner while a partition moves may be
//     dropped (the sweeper closes those orders).
//   - A replica or a Redis Cluster node publishes events only for its own
//     keys; neither is supported.
package rediskeyspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/timing/dispatch"
)

// Defaults of Config.
const (
	URLDefault          = "redis://127.0.0.1:6379/0"
	NamespaceDefault    = "hourglass"
	PingIntervalDefault = time.Second
	// PingTimeout bounds the reachability checks of Open and Run.
	PingTimeout = 5 * time.Second
	// indexRetention is how long past its deadline an order stays in
	// <ns>:index: long enough for its key to have expired, after which a
	// Cancel has nothing left to delete.
	indexRetention = time.Minute
	// pruneInterval is how often Run trims <ns>:index.
	pruneInterval = 30 * time.Second
	// scheduleChunk is the most commands per pipeline round trip.
	scheduleChunk = 1000
)

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	// URL is the Redis URL (redis://[user:password@]host:port/db or
	// rediss:// for TLS), parsed by go-redis's ParseURL.
	URL string
	// Namespace prefixes the keys: <Namespace>:order:… and
	// <Namespace>:index.
	Namespace string
	// PingInterval is how long the subscription may stay silent before Run
	// pings Redis to notice a dead connection; 100 ms to 1 min.
	PingInterval time.Duration
	Dispatch     dispatch.Config
	Clock        hourglass.Clock
	Logger       *slog.Logger
}

// Validate returns an error naming the field and its allowed range for a
// value out of range; zero values are valid (the defaults).
func (c Config) Validate() error {
	if c.PingInterval != 0 && (c.PingInterval < 100*time.Millisecond || c.PingInterval > time.Minute) {
		return fmt.Errorf("rediskeyspace: PingInterval must be between 100ms and 1m0s, got %s", c.PingInterval)
	}
	return nil
}

// Scheduler is the key-expiry delay mechanism. All its methods are safe for
// concurrent use; Run may be called again after it returned (timers pushed
// to the dispatcher and not yet delivered are kept for the next Run).
type Scheduler struct {
	cfg     Config
	client  *goredis.Client
	clock   hourglass.Clock
	timers  hourglass.TimerClock // clock's timers: an early event's hold
	log     *slog.Logger
	disp    *dispatch.Dispatcher
	prefix  string // <ns>:order:
	index   string // <ns>:index
	channel string // __keyevent@<db>__:expired
	where   string // host:port db n, for messages

	// owned is the mask of the partitions whose timers this process
	// delivers (hourglass.Parts.Mask; -1: every partition).
	owned atomic.Int64

	mu      sync.Mutex
	holding map[hourglass.ClockTimer]struct{} // events that arrived before their deadline
}

var (
	_ hourglass.Scheduler   = (*Scheduler)(nil)
	_ hourglass.Canceler    = (*Scheduler)(nil)
	_ hourglass.Partitioned = (*Scheduler)(nil)
)

// Own implements hourglass.Partitioned: from now on this process delivers
// only the expired timers of parts (nil: every partition); every node hears
// every event, so each timer's owner hears it too. It does not block; safe
// for concurrent use, idempotent.
func (s *Scheduler) Own(parts hourglass.Parts) { s.owned.Store(parts.Mask()) }

func (s *Scheduler) owns(id int64) bool {
	return s.owned.Load()>>hourglass.PartitionOf(id)&1 == 1
}

// Open connects to Redis at cfg.URL, checks it answers PING within
// PingTimeout and turns on expired-key events (notify-keyspace-events must
// include E and x). Each failure is a one-line error saying what to fix; a
// user not allowed CONFIG is told to set notify-keyspace-events in
// redis.conf instead. The Scheduler must be closed.
func Open(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.URL = cmp.Or(cfg.URL, URLDefault)
	cfg.Namespace = cmp.Or(cfg.Namespace, NamespaceDefault)
	cfg.PingInterval = cmp.Or(cfg.PingInterval, PingIntervalDefault)
	if cfg.Clock == nil {
		cfg.Clock = hourglass.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Dispatch.Logger == nil {
		cfg.Dispatch.Logger = cfg.Logger
	}
	opt, err := options(cfg.URL)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:     cfg,
		client:  goredis.NewClient(opt),
		clock:   cfg.Clock,
		timers:  hourglass.WithTimers(cfg.Clock),
		log:     cfg.Logger,
		disp:    dispatch.New(cfg.Dispatch),
		prefix:  cfg.Namespace + ":order:",
		index:   cfg.Namespace + ":index",
		channel: fmt.Sprintf("__keyevent@%d__:expired", opt.DB),
		where:   fmt.Sprintf("%s db %d", opt.Addr, opt.DB),
		holding: map[hourglass.ClockTimer]struct{}{},
	}
	s.owned.Store(-1)
	pingCtx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := s.client.Ping(pingCtx).Err(); err != nil {
		s.client.Close()
		return nil, fmt.Errorf("rediskeyspace: cannot use Redis at %s (start it, or fix the URL or its credentials): %w", s.where, err)
	}
	if err := s.enableEvents(pingCtx); err != nil {
		s.client.Close()
		return nil, err
	}
	return s, nil
}

// options parses a Redis URL into the client's options.
func options(rawURL string) (*goredis.Options, error) {
	opt, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("rediskeyspace: bad Redis URL (want redis://[user:password@]host:port/db): %w", redact.Err(err, rawURL))
	}
	if opt.MaintNotificationsConfig == nil {
		// A Redis Cloud feature; a plain server only costs a round trip.
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	return opt, nil
}

// enableEvents adds E (keyevent channels) and x (expired events) to the
// server's notify-keyspace-events, keeping the flags already set.
func (s *Scheduler) enableEvents(ctx context.Context) error {
	const param = "notify-keyspace-events"
	cur, err := s.client.ConfigGet(ctx, param).Result()
	if err != nil {
		return fmt.Errorf("rediskeyspace: read %s at %s%s: %w", param, s.where, configAdvice(err), err)
	}
	flags, ok := withExpiredEvents(cur[param])
	if !ok {
		if err := s.client.ConfigSet(ctx, param, flags).Err(); err != nil {
			return fmt.Errorf("rediskeyspace: enable expired-key events at %s%s: %w", s.where, configAdvice(err), err)
		}
	}
	return nil
}

// configAdvice says what to do when the server refused a CONFIG command
// (as opposed to not being reachable).
func configAdvice(err error) string {
	var refused goredis.Error
	if errors.As(err, &refused) {
		return ` (CONFIG is not permitted: set notify-keyspace-events to include "Ex" in redis.conf, or grant the user CONFIG)`
	}
	return ""
}

// withExpiredEvents returns notify-keyspace-events flags that include
// expired keyevent notifications (E, and x or the alias A), keeping the
// given ones; ok reports whether flags already did.
func withExpiredEvents(flags string) (string, bool) {
	hasE := strings.ContainsRune(flags, 'E')
	hasX := strings.ContainsAny(flags, "xA")
	if hasE && hasX {
		return flags, true
	}
	if !hasE {
		flags += "E"
	}
	if !hasX {
		flags += "x"
	}
	return flags, false
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "rediskeyspace", Feed: hourglass.FeedOutbox, Durable: false}
}

// Schedule implements hourglass.Scheduler: it writes one key with a TTL per
// timer (a timer already due goes to the dispatcher instead) and returns
// once Redis has them. Scheduling an order again adds a second key; both
// fire. It returns an error, with any part of the batch possibly stored,
// when Redis cannot be reached; retrying is safe.
func (s *Scheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	now := hourglass.UnixMilli(s.clock.Now())
	var due, later []hourglass.DueItem
	for _, t := range timers {
		// A due timer of a partition another node owns expires at once
		// in Redis, for its owner to hear.
		if hourglass.UnixMilli(t.At) <= now && s.owns(t.ID) {
			due = append(due, t)
		} else {
			later = append(later, t)
		}
	}
	for chunk := range slices.Chunk(later, scheduleChunk) {
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			index := make([]goredis.Z, len(chunk))
			for i, t := range chunk {
				d := hourglass.UnixMilli(t.At)
				// A TTL relative to now: the key expires no earlier than
				// the deadline whatever Redis's clock says (Redis expires a
				// key once its clock is past the expiry, never at it).
				p.Set(ctx, s.key(t.ID, d), d, time.Duration(max(d-now, 1))*time.Millisecond)
				index[i] = goredis.Z{Score: float64(d), Member: t.ID}
			}
			p.ZAdd(ctx, s.index, index...)
			return nil
		})
		if err != nil {
			return fmt.Errorf("rediskeyspace: schedule %d timers: %w", len(timers), err)
		}
	}
	s.disp.Push(due)
	return nil
}

func (s *Scheduler) key(orderID, deadlineMs int64) string {
	return s.prefix + strconv.FormatInt(orderID, 10) + ":" + strconv.FormatInt(deadlineMs, 10)
}

// parseKey returns the timer of an expired key named by key, and false for
// a key that is not one of this namespace's timers.
func parseKey(prefix, key string) (hourglass.DueItem, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return hourglass.DueItem{}, false
	}
	idText, deadlineText, ok := strings.Cut(rest, ":")
	if !ok {
		return hourglass.DueItem{}, false
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil {
		return hourglass.DueItem{}, false
	}
	d, err := strconv.ParseInt(deadlineText, 10, 64)
	if err != nil || d < 0 {
		return hourglass.DueItem{}, false
	}
	return hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(d)}, true
}

// Cancel implements hourglass.Canceler: it deletes the orders' keys (the
// latest scheduled per order, found through <ns>:index). Idempotent; it
// returns an error when Redis cannot be reached.
func (s *Scheduler) Cancel(ctx context.Context, orderIDs []int64) error {
	for chunk := range slices.Chunk(orderIDs, scheduleChunk) {
		members := make([]string, len(chunk))
		for i, id := range chunk {
			members[i] = strconv.FormatInt(id, 10)
		}
		scores, err := s.client.ZMScore(ctx, s.index, members...).Result()
		if err != nil {
			return fmt.Errorf("rediskeyspace: cancel %d timers: find their keys: %w", len(orderIDs), err)
		}
		var keys []string
		for i, sc := range scores {
			if sc != 0 { // ZMSCORE's nil (not scheduled) reads as 0
				keys = append(keys, s.key(chunk[i], int64(sc)))
			}
		}
		_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if len(keys) > 0 {
				p.Del(ctx, keys...)
			}
			p.ZRem(ctx, s.index, anys(members)...)
			return nil
		})
		if err != nil {
			return fmt.Errorf("rediskeyspace: cancel %d timers: %w", len(orderIDs), err)
		}
	}
	return nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Run implements hourglass.Scheduler: it turns expired-key events on again,
// subscribes to them and delivers the namespace's timers through the
// dispatcher until ctx ends, then returns nil. It returns an error when
// Redis cannot be reached or the subscription breaks (events published
// until the next Run are lost: the sweeper closes those orders); the caller
// retries with backoff. A delivery in progress when Run returns with an
// error is abandoned (the sweeper, again, is the net); timers queued in the
// dispatcher wait for the next Run.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	setupCtx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := s.enableEvents(setupCtx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ps := s.client.Subscribe(setupCtx, s.channel)
	defer ps.Close()
	// Subscribe reports no error: the confirmation (or the failure) is the
	// first thing received.
	msg, err := ps.ReceiveTimeout(setupCtx, PingTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("rediskeyspace: subscribe to %s: %w", s.channel, err)
	}
	if _, ok := msg.(*goredis.Subscription); !ok {
		return fmt.Errorf("rediskeyspace: subscribe to %s: unexpected reply %T", s.channel, msg)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.disp.Run(runCtx, deliver) }()
	defer func() { stop(); wg.Wait() }()
	// A blocked receive does not watch ctx: closing the subscription ends it.
	unwatch := context.AfterFunc(runCtx, func() { ps.Close() })
	defer unwatch()

	lastPrune := time.Time{}
	for {
		if now := s.clock.Now(); now.Sub(lastPrune) >= pruneInterval {
			if err := s.prune(runCtx, now); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			lastPrune = now
		}
		msg, err := ps.ReceiveTimeout(runCtx, s.cfg.PingInterval)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return fmt.Errorf("rediskeyspace: receive expired events: %w", err)
			}
			// Silence: make sure the connection is still there.
			if err := ps.Ping(runCtx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("rediskeyspace: ping the subscription: %w", err)
			}
			continue
		}
		if m, ok := msg.(*goredis.Message); ok {
			if t, ok := parseKey(s.prefix, m.Payload); ok && s.owns(t.ID) {
				s.fire(t)
			}
		}
	}
}

// fire hands an expired timer to the dispatcher, or holds it until its
// deadline if the event came early (Redis's clock ahead of this one), on
// the clock's timer: the close path must never see a timer before its
// deadline.
func (s *Scheduler) fire(t hourglass.DueItem) {
	wait := t.At.Sub(s.clock.Now())
	if wait <= 0 {
		s.disp.Push([]hourglass.DueItem{t})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var tm hourglass.ClockTimer
	tm = s.timers.AfterFunc(wait, func() {
		s.mu.Lock()
		delete(s.holding, tm)
		s.mu.Unlock()
		s.disp.Push([]hourglass.DueItem{t})
	})
	s.holding[tm] = struct{}{}
}

// prune drops index entries whose keys have long expired.
func (s *Scheduler) prune(ctx context.Context, now time.Time) error {
	until := hourglass.UnixMilli(now.Add(-indexRetention))
	if err := s.client.ZRemRangeByScore(ctx, s.index, "-inf", strconv.FormatInt(until, 10)).Err(); err != nil {
		return fmt.Errorf("rediskeyspace: prune %s: %w", s.index, err)
	}
	return nil
}

// Close implements hourglass.Scheduler: it drops events held for an early
// arrival and closes the connection pool. Keys stay in Redis and expire.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	for tm := range s.holding {
		tm.Stop()
	}
	clear(s.holding)
	s.mu.Unlock()
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("rediskeyspace: close: %w", err)
	}
	return nil
}

// destroyBatch is how many keys one SCAN step of Destroy asks for.
const destroyBatch = 1000

// Destroy deletes the namespace's keys (one per pending timer, and the
// index), with every timer in them: for tests and for retiring a
// namespace. The timers' keys are found by SCAN, a bounded step at a time,
// never by KEYS. It connects on its own, so it works before or after
// Close. Idempotent.
func (s *Scheduler) Destroy(ctx context.Context) error {
	opt, err := options(s.cfg.URL)
	if err != nil {
		return err
	}
	client := goredis.NewClient(opt)
	defer client.Close()
	// The index, then the timers' keys, a SCAN step's worth at a time.
	keys := []string{s.index}
	unlink := func() error {
		err := client.Unlink(ctx, keys...).Err()
		keys = keys[:0]
		return err
	}
	iter := client.Scan(ctx, 0, s.prefix+"*", destroyBatch).Iterator()
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) >= destroyBatch {
			if err := unlink(); err != nil {
				return fmt.Errorf("rediskeyspace: destroy namespace %s: %w", s.cfg.Namespace, err)
			}
		}
	}
	err = iter.Err()
	if err == nil && len(keys) > 0 {
		err = unlink()
	}
	if err != nil {
		return fmt.Errorf("rediskeyspace: destroy namespace %s: %w", s.cfg.Namespace, err)
	}
	return nil
}
