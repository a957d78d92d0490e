// Package redis is a durable delay mechanism on a Redis sorted set, in the
// style of asynq's scheduled set.
//
// # How it works
//
// Every timer is a member of its partition's sorted set <ns>:timers:<p>
// (p = hourglass.PartitionOf(order id), 0..63): the member is the order id,
// the score its deadline in unix milliseconds. Schedule adds timers with
// ZADD (pipelined, 1,000 per command); Cancel removes them with ZREM. The engine feeds Schedule from the order database's outbox
// (FeedOutbox), so a timer reaches Redis even if this process dies between
// the order's commit and the publish.
//
// Run is one poller and a few delivery workers. The poller runs one Lua
// script (claimScript) over the partitions this process owns (Own; every
// partition until told otherwise) that, atomically, for each of them:
//
//  1. moves in-flight timers whose lease has expired (a consumer died or gave
//     up) back into <ns>:timers:<p> with their original deadline;
//  2. moves members with score <= now from <ns>:timers:<p> into the
//     partition's in-flight set <ns>:inflight:<p>, as "id:deadlineMs" scored
//     by the lease expiry now+VisibilityTimeout, and returns them, up to
//     Batch in all: an equal share from each partition first, earliest
//     deadline first, then the rest (each claim starts at the next
//     partition), so a backlog in one does not starve the others;
//
// and returns the earliest score left in any of those sets.
//
// Because a member leaves <ns>:timers:<p> in the same script that claims it,
// two consumers never claim the same timer at once; because a node claims
// only the partitions it owns, the timer goes to the node whose engine
// closes it. A worker hands the claimed batch to deliver, but first gives
// back (lease expiry now) the timers of partitions lost since the claim, for
// their new owner's next claim; when deliver returns nil the members are
// removed from <ns>:inflight:<p> (the acknowledgement). When deliver
// fails the lease is shortened to now+backoff, so the batch comes back after
// a capped exponential backoff, by this or any other consumer. When Run's
// context ends mid-delivery the lease is released (set to now) so another
// consumer takes the batch at once. A consumer that dies holds its batch
// only until the lease expires: nothing is lost.
//
// The poller then sleeps until that earliest score (a timer's deadline or a
// lease's expiry), at most MaxWait (1 s), or until Schedule in this process
// adds an earlier timer. The cap bounds how late a timer published by
// another process with a deadline less than MaxWait away can be; the
// engine's outbox relay publishes each order's timer right after its
// creation, minutes before its deadline, so the cap matters only after an
// outage's backlog. A pub/sub wake-up across processes was left out for that
// reason.
//
// # Upgrading from one set per namespace
//
// Before the partitioned sets, every timer was in <ns>:timers and
// <ns>:inflight. Each poller moves what it finds there (at most once per
// MaxWait, 1,000 members a time; in-flight ones once their lease expired)
// into the partitioned sets with one script (migrateScript), so a rolling
// upgrade loses nothing: an old process still writing there is drained too.
//
// # Time
//
// "Now" is Config.Clock's (the clock of the process that delivers), not
// Redis's TIME: the store compares the deadline with its own clock when it
// closes an order, and a close attempted before the deadline is a no-op
// that would acknowledge a timer without effect. Each consumer therefore
// decides due-ness by the clock of the machine that closes; clock skew
// between application nodes (NTP keeps it to milliseconds) shows up as that
// much lateness, never as an early close on the node that claims.
//
// # Durability
//
// Timers are as durable as the Redis server: with AOF (appendonly yes,
// appendfsync everysec or always) a Redis restart keeps them; with no
// persistence a restart loses the set, and the engine's sweeper closes those
// orders from the database. Redis Cluster is not supported (the script
// touches several keys).
package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/hourglass/hourglass/timing"
)

// Defaults of Config.
const (
	URLDefault               = "redis://127.0.0.1:6379/0"
	NamespaceDefault         = "hourglass"
	VisibilityTimeoutDefault = 30 * time.Second
	BatchDefault             = 512
	WorkersDefault           = 2
	MaxWaitDefault           = time.Second
	RetryMaxDefault          = 5 * time.Second
	// PingTimeout bounds the reachability check of Open.
	PingTimeout = 5 * time.Second
	// ackTimeout bounds an acknowledgement or lease change, which must
	// outlive Run's context: a delivered batch is still acknowledged when
	// Run is stopping.
	ackTimeout = 5 * time.Second
	// scheduleChunk is the most members per ZADD or ZREM command.
	scheduleChunk = 1000
)

// Config configures a Scheduler; zero values mean the defaults.
type Config struct {
	// URL is the Redis URL (redis://[user:password@]host:port/db or
	// rediss:// for TLS), parsed by go-redis's ParseURL.
	URL string
	// Namespace prefixes the keys: <Namespace>:timers:<p> and
	// <Namespace>:inflight:<p> for each partition p. Deployments sharing a
	// Redis use different ones.
	Namespace string
	// VisibilityTimeout is how long a claimed batch stays invisible to other
	// consumers before it is delivered again if not acknowledged: the
	// longest a delivery may take. 1 s to 1 h.
	VisibilityTimeout time.Duration
	// Batch is the most timers claimed and delivered at once, 1 to 2,000
	// (the claim script unpacks twice as many arguments; Lua allows 8,000).
	Batch int
	// Workers is the number of concurrent deliveries, 1 to 64.
	Workers int
	// MaxWait caps the poller's sleep, so timers published by other
	// processes are seen within it; 10 ms to 1 min.
	MaxWait time.Duration
	// RetryMax caps the backoff after a failed delivery; 10 ms to 1 min.
	RetryMax time.Duration
	Clock    hourglass.Clock
	Logger   *slog.Logger
}

// Validate returns an error naming the field and its allowed range for a
// value out of range; zero values are valid (the defaults).
func (c Config) Validate() error {
	dur := func(name string, d, lo, hi time.Duration) error {
		if d != 0 && (d < lo || d > hi) {
			return fmt.Errorf("redis: %s must be between %s and %s, got %s", name, lo, hi, d)
		}
		return nil
	}
	num := func(name string, n, lo, hi int) error {
		if n != 0 && (n < lo || n > hi) {
			return fmt.Errorf("redis: %s must be between %d and %d, got %d", name, lo, hi, n)
		}
		return nil
	}
	return errors.Join(
		dur("VisibilityTimeout", c.VisibilityTimeout, time.Second, time.Hour),
		dur("MaxWait", c.MaxWait, 10*time.Millisecond, time.Minute),
		dur("RetryMax", c.RetryMax, 10*time.Millisecond, time.Minute),
		num("Batch", c.Batch, 1, 2000),
		num("Workers", c.Workers, 1, 64),
	)
}

// Scheduler is the Redis sorted-set delay mechanism. All its methods are
// safe for concurrent use; Run may be called again after it returned.
type Scheduler struct {
	cfg    Config
	client *goredis.Client
	clock  hourglass.Clock
	log    *slog.Logger
	// legacyTimers and legacyInflight are the unpartitioned sets of
	// earlier versions, drained into the partitioned ones (migrate).
	legacyTimers   string // <ns>:timers
	legacyInflight string // <ns>:inflight
	// claimCmd runs claimScript by its SHA-1 (EVALSHA), falling back to
	// EVAL when the server's script cache was emptied by a restart.
	claimCmd   *goredis.Script
	migrateCmd *goredis.Script

	// owned is the partitions this process claims (nil pointer: every
	// partition); rotate starts each claim at another one.
	owned  atomic.Pointer[hourglass.Parts]
	rotate atomic.Uint64

	mu         sync.Mutex
	migratedAt int64 // unix ms of the last migrate; guarded by mu
	sleepUntil int64 // unix ms the poller sleeps towards; max int64 while it is awake
	wake       chan struct{}
}

var (
	_ hourglass.Scheduler   = (*Scheduler)(nil)
	_ hourglass.Canceler    = (*Scheduler)(nil)
	_ hourglass.Partitioned = (*Scheduler)(nil)
)

// timersKey and inflightKey name partition p's sets.
func (s *Scheduler) timersKey(p int) string   { return s.legacyTimers + ":" + strconv.Itoa(p) }
func (s *Scheduler) inflightKey(p int) string { return s.legacyInflight + ":" + strconv.Itoa(p) }

// claimScript claims due timers of the owned partitions; see the package
// comment.
//
// KEYS[2k-1] <ns>:timers:<p>    zset: member order id, score deadline (unix ms)
// KEYS[2k]   <ns>:inflight:<p>  zset: member "id:deadlineMs", score lease expiry (unix ms)
//
//	one pair per owned partition, in the order they are claimed
//
// ARGV[1] now, unix ms: timers with deadline <= now are due, leases <= now expired
// ARGV[2] lease expiry given to the claimed members (now + visibility timeout)
// ARGV[3] the most members requeued per partition, and claimed in all:
//
//	first up to an equal share of it from each partition, earliest
//	deadline first, then what is left from the first partitions that
//	have more
//
// Returns {next, k, member, k, member...}: next is the earliest score left
// in any of the sets as a string ("-1" when all are empty); each member is
// "id:deadlineMs", held in KEYS[2k]. A requeued member does not replace a
// newer timer of the same order (NX); a malformed in-flight member (not
// written by this package) is dropped.
const claimScript = `
local now, lease, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = {'-1'}
local left = limit
local n = #KEYS / 2
for k = 1, n do
  local tk, ik = KEYS[2 * k - 1], KEYS[2 * k]
  local expired = redis.call('ZRANGEBYSCORE', ik, '-inf', now, 'LIMIT', 0, limit)
  if #expired > 0 then
    local back = {}
    for _, m in ipairs(expired) do
      local id, deadline = string.match(m, '^(.*):([^:]*)$')
      if id and tonumber(deadline) then
        back[#back + 1] = deadline
        back[#back + 1] = id
      end
    end
    if #back > 0 then
      redis.call('ZADD', tk, 'NX', unpack(back))
    end
    redis.call('ZREM', ik, unpack(expired))
  end
end
local share = math.ceil(limit / n)
for pass = 1, 2 do
  for k = 1, n do
    if left == 0 then break end
    local tk, ik = KEYS[2 * k - 1], KEYS[2 * k]
    local want = left
    if pass == 1 then want = math.min(share, left) end
    local due = redis.call('ZRANGEBYSCORE', tk, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want)
    if #due > 0 then
      local ids, held = {}, {}
      for i = 1, #due, 2 do
        local m = due[i] .. ':' .. due[i + 1]
        ids[#ids + 1] = due[i]
        held[#held + 1] = lease
        held[#held + 1] = m
        out[#out + 1] = tostring(k)
        out[#out + 1] = m
      end
      redis.call('ZADD', ik, unpack(held))
      redis.call('ZREM', tk, unpack(ids))
      left = left - #ids
    end
  end
end
local next = nil
for k = 1, n do
  local tk, ik = KEYS[2 * k - 1], KEYS[2 * k]
  local t = redis.call('ZRANGE', tk, 0, 0, 'WITHSCORES')
  if #t > 0 and (next == nil or tonumber(t[2]) < tonumber(next)) then next = t[2] end
  local f = redis.call('ZRANGE', ik, 0, 0, 'WITHSCORES')
  if #f > 0 and (next == nil or tonumber(f[2]) < tonumber(next)) then next = f[2] end
end
if next then out[1] = next end
return out
`

// migrateScript moves members of the unpartitioned sets of earlier
// versions into their partitions' sets (the partition of an id is computed
// in Go: Lua's numbers cannot hold every int64).
//
// KEYS[1] <ns>:timers     (legacy) member order id, score deadline
// KEYS[2] <ns>:inflight   (legacy) member "id:deadlineMs", score lease expiry
// KEYS[3…] the destination sets <ns>:timers:<p>
// ARGV    quadruples: source (1 or 2), member, index into KEYS of the
//
//	destination, deadline (unix ms)
//
// A timer member moves only if it still has that deadline (an old process
// may have rescheduled it meanwhile: it is moved on the next pass); an
// in-flight member moves if it is still there. Neither replaces a timer of
// the same order already in the destination (NX). Returns the number moved.
const migrateScript = `
local moved = 0
for i = 1, #ARGV, 4 do
  local src, m, dest, deadline = ARGV[i], ARGV[i + 1], KEYS[tonumber(ARGV[i + 2])], ARGV[i + 3]
  if src == '1' then
    local score = redis.call('ZSCORE', KEYS[1], m)
    if score and tonumber(score) == tonumber(deadline) then
      redis.call('ZADD', dest, 'NX', deadline, m)
      redis.call('ZREM', KEYS[1], m)
      moved = moved + 1
    end
  elseif redis.call('ZREM', KEYS[2], m) == 1 then
    local id = string.match(m, '^(.*):[^:]*$')
    redis.call('ZADD', dest, 'NX', deadline, id)
    moved = moved + 1
  end
end
return moved
`

// Open connects to Redis at cfg.URL, checks it answers PING within
// PingTimeout, that it runs scripts and that the namespace's keys are sorted
// sets (or absent). Each failure is a one-line error saying what to fix.
// The Scheduler must be closed.
func Open(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.URL = cmp.Or(cfg.URL, URLDefault)
	cfg.Namespace = cmp.Or(cfg.Namespace, NamespaceDefault)
	cfg.VisibilityTimeout = cmp.Or(cfg.VisibilityTimeout, VisibilityTimeoutDefault)
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.Workers = cmp.Or(cfg.Workers, WorkersDefault)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, MaxWaitDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	if cfg.Clock == nil {
		cfg.Clock = hourglass.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	client, where, err := connect(ctx, cfg.URL)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:            cfg,
		client:         client,
		clock:          cfg.Clock,
		log:            cfg.Logger,
		legacyTimers:   cfg.Namespace + ":timers",
		legacyInflight: cfg.Namespace + ":inflight",
		claimCmd:       goredis.NewScript(claimScript),
		migrateCmd:     goredis.NewScript(migrateScript),
		sleepUntil:     1<<63 - 1,
		wake:           make(chan struct{}, 1),
	}
	if err := s.check(ctx, where); err != nil {
		client.Close()
		return nil, err
	}
	return s, nil
}

// connect parses rawURL and pings the server. where describes the server
// for messages without the password.
func connect(ctx context.Context, rawURL string) (client *goredis.Client, where string, err error) {
	opt, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("redis: bad Redis URL (want redis://[user:password@]host:port/db): %w", redact.Err(err, rawURL))
	}
	if opt.MaintNotificationsConfig == nil {
		// Maintenance notifications are a Redis Cloud feature; asking a
		// plain server for them at every connect only adds a round trip.
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	where = fmt.Sprintf("%s db %d", opt.Addr, opt.DB)
	client = goredis.NewClient(opt)
	pingCtx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		client.Close()
		return nil, "", fmt.Errorf("redis: cannot use Redis at %s (start it, or fix the URL or its credentials): %w", where, err)
	}
	return client, where, nil
}

func (s *Scheduler) check(ctx context.Context, where string) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	for _, script := range []*goredis.Script{s.claimCmd, s.migrateCmd} {
		if err := script.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("redis: Redis at %s does not run scripts (grant the user SCRIPT and EVALSHA): %w", where, err)
		}
	}
	keys := s.keys()
	types := make([]*goredis.StatusCmd, len(keys))
	_, err := s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for i, key := range keys {
			types[i] = pipe.Type(ctx, key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: check the keys %s:* at %s (grant the user read access to them): %w", s.cfg.Namespace, where, err)
	}
	for i, key := range keys {
		if typ := types[i].Val(); typ != "none" && typ != "zset" {
			return fmt.Errorf("redis: key %s at %s is a %s, not a sorted set: choose another namespace", key, where, typ)
		}
	}
	return nil
}

// Info implements hourglass.Scheduler.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "redis", Feed: hourglass.FeedOutbox, Durable: true}
}

// Own implements hourglass.Partitioned: from the next claim on, this
// process claims only the timers of parts (nil: every partition). A batch
// already claimed gives its timers of lost partitions back before
// delivering. It does not block; safe for concurrent use, idempotent.
func (s *Scheduler) Own(parts hourglass.Parts) {
	if parts == nil {
		s.owned.Store(nil)
	} else {
		parts = slices.Clone(parts)
		s.owned.Store(&parts)
	}
	s.signal()
}

// ownedParts returns the partitions to claim, ascending.
func (s *Scheduler) ownedParts() hourglass.Parts {
	if p := s.owned.Load(); p != nil {
		return *p
	}
	all := make(hourglass.Parts, hourglass.Partitions)
	for i := range all {
		all[i] = i
	}
	return all
}

// owns reports whether this process claims the partition of id.
func (s *Scheduler) owns(id int64) bool {
	p := s.owned.Load()
	return p == nil || p.Has(id)
}

// Schedule implements hourglass.Scheduler: it adds each timer to its
// partition's set <ns>:timers:<p> and returns once Redis has them in memory (durable as far as
// its persistence allows). Scheduling an order again replaces its deadline.
// It returns an error, and any part of the batch may have been stored, when
// Redis cannot be reached; retrying is safe (idempotent).
func (s *Scheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	if len(timers) == 0 {
		return nil
	}
	earliest := int64(1<<63 - 1)
	var byPart [hourglass.Partitions][]goredis.Z
	for _, t := range timers {
		d := hourglass.UnixMilli(t.At)
		if s.owns(t.ID) {
			earliest = min(earliest, d)
		}
		p := hourglass.PartitionOf(t.ID)
		byPart[p] = append(byPart[p], goredis.Z{Score: float64(d), Member: t.ID})
	}
	_, err := s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for p, members := range byPart {
			for chunk := range slices.Chunk(members, scheduleChunk) {
				pipe.ZAdd(ctx, s.timersKey(p), chunk...)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: schedule %d timers: %w", len(timers), err)
	}
	s.mu.Lock()
	wake := earliest < s.sleepUntil
	s.mu.Unlock()
	if wake {
		s.signal()
	}
	return nil
}

// Cancel implements hourglass.Canceler: it removes the orders' timers from
// their partitions' sets. A timer already claimed still fires (into a no-op close).
// Idempotent; it returns an error when Redis cannot be reached.
func (s *Scheduler) Cancel(ctx context.Context, orderIDs []int64) error {
	if len(orderIDs) == 0 {
		return nil
	}
	var byPart [hourglass.Partitions][]any
	for _, id := range orderIDs {
		p := hourglass.PartitionOf(id)
		byPart[p] = append(byPart[p], id)
	}
	_, err := s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for p, members := range byPart {
			for chunk := range slices.Chunk(members, scheduleChunk) {
				pipe.ZRem(ctx, s.timersKey(p), chunk...)
			}
		}
		// An earlier version's process may have put it in the old set.
		for chunk := range slices.Chunk(orderIDs, scheduleChunk) {
			members := make([]any, len(chunk))
			for i, id := range chunk {
				members[i] = id
			}
			pipe.ZRem(ctx, s.legacyTimers, members...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: cancel %d timers: %w", len(orderIDs), err)
	}
	return nil
}

// Run implements hourglass.Scheduler: it claims due timers and delivers
// them with Workers goroutines until ctx ends, then returns nil once the
// deliveries in progress have returned. It returns an error as soon as a
// claim fails (Redis went away), after letting the deliveries in progress
// finish; the caller retries with backoff.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	batches := make(chan []claimed)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.work(ctx, stop, batches, deliver)
		}()
	}
	err := s.poll(ctx, batches)
	close(stop)
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// poll claims due timers and hands them to the workers, sleeping in between
// until the next score. It returns when ctx ends or a claim fails.
func (s *Scheduler) poll(ctx context.Context, batches chan<- []claimed) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		// Awake: any Schedule from now on signals, so a timer added while
		// the claim runs is not slept through.
		s.mu.Lock()
		s.sleepUntil = 1<<63 - 1
		s.mu.Unlock()
		now := hourglass.UnixMilli(s.clock.Now())
		if err := s.migrate(ctx, now); err != nil && ctx.Err() == nil {
			// The claim tells whether Redis is gone; this is retried.
			s.log.Warn("redis: could not move timers of the unpartitioned sets of an earlier version; retrying", "err", err)
		}
		batch, next, err := s.claim(ctx, now)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("redis: claim due timers: %w", err)
		}
		if len(batch) > 0 {
			select {
			case batches <- batch:
			case <-ctx.Done():
				s.release(ctx, batch)
				return nil
			}
		}
		if len(batch) == s.cfg.Batch {
			continue // more may be due
		}
		wakeAt := now + s.cfg.MaxWait.Milliseconds()
		if next >= 0 {
			wakeAt = min(wakeAt, next)
		}
		s.mu.Lock()
		s.sleepUntil = wakeAt
		s.mu.Unlock()
		// A score of D ms is due once now >= D, i.e. at D ms exactly.
		wait := hourglass.FromUnixMilli(wakeAt).Sub(s.clock.Now())
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		}
	}
}

// claimed is a timer held in inflight (<ns>:inflight:<p>) under the
// member "id:deadlineMs".
type claimed struct {
	timer    hourglass.DueItem
	member   string
	inflight string
}

// claim runs claimScript at now over the owned partitions and returns the
// claimed timers and the earliest score left (-1 if none).
func (s *Scheduler) claim(ctx context.Context, now int64) ([]claimed, int64, error) {
	parts := s.ownedParts()
	if len(parts) == 0 {
		return nil, -1, nil
	}
	start := int(s.rotate.Add(1) % uint64(len(parts)))
	keys := make([]string, 0, 2*len(parts))
	for i := range parts {
		p := parts[(start+i)%len(parts)]
		keys = append(keys, s.timersKey(p), s.inflightKey(p))
	}
	lease := now + s.cfg.VisibilityTimeout.Milliseconds()
	reply, err := s.claimCmd.Run(ctx, s.client, keys, now, lease, s.cfg.Batch).StringSlice()
	if err != nil {
		return nil, 0, err
	}
	if len(reply)%2 == 0 {
		return nil, 0, fmt.Errorf("a reply of %d strings from the claim script, want an odd number", len(reply))
	}
	next, err := parseScore(reply[0])
	if err != nil {
		return nil, 0, fmt.Errorf("next score: %w", err)
	}
	batch := make([]claimed, 0, len(reply)/2)
	for i := 1; i < len(reply); i += 2 {
		k, err := strconv.Atoi(reply[i])
		if err != nil || k < 1 || 2*k > len(keys) {
			return nil, 0, fmt.Errorf("the claim script returned key index %q", reply[i])
		}
		m, inflight := reply[i+1], keys[2*k-1]
		t, err := parseMember(m)
		if err != nil {
			// Not ours (someone wrote to the namespace): acknowledge it so
			// it does not come back forever.
			s.log.Error("redis: dropping a malformed in-flight member", "key", inflight, "member", m, "err", err)
			s.client.ZRem(ctx, inflight, m)
			continue
		}
		batch = append(batch, claimed{timer: t, member: m, inflight: inflight})
	}
	return batch, next, nil
}

// migrateChunk is the most members migrate moves per pass.
const migrateChunk = 1000

// migrate moves what it finds in the unpartitioned sets of earlier
// versions into the partitioned ones (in-flight members whose lease
// expired, as timers), at most once per MaxWait. A malformed member is
// left where it is. Safe to run in several processes at once.
func (s *Scheduler) migrate(ctx context.Context, now int64) error {
	s.mu.Lock()
	if now-s.migratedAt < s.cfg.MaxWait.Milliseconds() {
		s.mu.Unlock()
		return nil
	}
	s.migratedAt = now
	s.mu.Unlock()
	var t, f *goredis.ZSliceCmd
	_, err := s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		t = pipe.ZRangeWithScores(ctx, s.legacyTimers, 0, migrateChunk-1)
		f = pipe.ZRangeByScoreWithScores(ctx, s.legacyInflight, &goredis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: migrateChunk})
		return nil
	})
	timers, inflight := t.Val(), f.Val()
	if err != nil || len(timers)+len(inflight) == 0 {
		return err
	}
	keys := []string{s.legacyTimers, s.legacyInflight}
	dest := map[int]int{} // partition → index into keys, from 1
	var args []any
	add := func(src int, member string, id, deadline int64) {
		p := hourglass.PartitionOf(id)
		k, ok := dest[p]
		if !ok {
			keys = append(keys, s.timersKey(p))
			k = len(keys)
			dest[p] = k
		}
		args = append(args, src, member, k, deadline)
	}
	for _, z := range timers {
		m, _ := z.Member.(string)
		if id, err := strconv.ParseInt(m, 10, 64); err == nil {
			add(1, m, id, int64(z.Score))
		}
	}
	for _, z := range inflight {
		m, _ := z.Member.(string)
		if t, err := parseMember(m); err == nil {
			add(2, m, t.ID, hourglass.UnixMilli(t.At))
		}
	}
	if len(args) == 0 {
		return nil
	}
	moved, err := s.migrateCmd.Run(ctx, s.client, keys, args...).Int()
	if err != nil {
		return err
	}
	s.log.Info("redis: moved timers of the unpartitioned sets of an earlier version into their partitions", "timers", moved)
	if len(timers) == migrateChunk || len(inflight) == migrateChunk {
		s.mu.Lock()
		s.migratedAt = 0 // more to move: on the next pass
		s.mu.Unlock()
	}
	return nil
}

// work delivers batches until stop is closed or ctx ends.
func (s *Scheduler) work(ctx context.Context, stop <-chan struct{}, batches <-chan []claimed, deliver hourglass.Deliver) {
	backoff := timing.Backoff{Min: 10 * time.Millisecond, Max: s.cfg.RetryMax}
	for {
		var batch []claimed
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case batch = <-batches:
		}
		// Timers of partitions lost since the claim go back, for their
		// new owner's next claim.
		var lost []claimed
		batch = slices.DeleteFunc(batch, func(c claimed) bool {
			if s.owns(c.timer.ID) {
				return false
			}
			lost = append(lost, c)
			return true
		})
		if len(lost) > 0 {
			s.release(ctx, lost)
		}
		if len(batch) == 0 {
			continue
		}
		timers := make([]hourglass.DueItem, len(batch))
		for i, c := range batch {
			timers[i] = c.timer
		}
		err := deliver(ctx, timers)
		if err == nil {
			backoff.Reset()
			s.ack(ctx, batch)
			continue
		}
		if ctx.Err() != nil {
			s.release(ctx, batch)
			return
		}
		wait := backoff.Next()
		s.log.Error("redis: delivery failed; redelivering after backoff", "timers", len(batch), "retry_in", wait, "err", err)
		s.lease(ctx, batch, hourglass.UnixMilli(s.clock.Now().Add(wait)))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-stop:
		case <-t.C:
		}
		t.Stop()
	}
}

// ack removes delivered members from their in-flight sets. If it fails
// they come back after the visibility timeout: a duplicate, absorbed by the
// close.
func (s *Scheduler) ack(ctx context.Context, batch []claimed) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	_, err := s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for key, ms := range byInflight(batch) {
			pipe.ZRem(ctx, key, ms...)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("redis: acknowledge failed; the timers will be delivered again after the visibility timeout", "timers", len(batch), "err", err)
	}
}

// release gives up a batch this consumer will not deliver: it is claimable
// again at once.
func (s *Scheduler) release(ctx context.Context, batch []claimed) {
	s.lease(ctx, batch, hourglass.UnixMilli(s.clock.Now()))
}

// lease sets the lease expiry of members still in flight to until (XX: a
// member acknowledged or requeued meanwhile is not added back).
func (s *Scheduler) lease(ctx context.Context, batch []claimed, until int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	_, err := s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for key, ms := range byInflight(batch) {
			zs := make([]goredis.Z, len(ms))
			for i, m := range ms {
				zs[i] = goredis.Z{Score: float64(until), Member: m}
			}
			pipe.ZAddXX(ctx, key, zs...)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("redis: could not shorten the lease; the timers will be delivered again after the visibility timeout", "timers", len(batch), "err", err)
		return
	}
	s.mu.Lock()
	wake := until < s.sleepUntil
	s.mu.Unlock()
	if wake {
		s.signal()
	}
}

// byInflight returns the members of batch by the in-flight set holding them.
func byInflight(batch []claimed) map[string][]any {
	out := map[string][]any{}
	for _, c := range batch {
		out[c.inflight] = append(out[c.inflight], c.member)
	}
	return out
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close implements hourglass.Scheduler: it closes the connection pool.
// Timers stay in Redis.
func (s *Scheduler) Close() error {
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}

// parseMember parses an in-flight member "id:deadlineMs".
func parseMember(m string) (hourglass.DueItem, error) {
	i := strings.LastIndexByte(m, ':')
	if i < 0 {
		return hourglass.DueItem{}, fmt.Errorf("member %q is not id:deadline", m)
	}
	id, err := strconv.ParseInt(m[:i], 10, 64)
	if err != nil {
		return hourglass.DueItem{}, fmt.Errorf("member %q: order id: %w", m, err)
	}
	d, err := parseScore(m[i+1:])
	if err != nil || d < 0 {
		return hourglass.DueItem{}, fmt.Errorf("member %q: deadline is not a non-negative unix ms", m)
	}
	return hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(d)}, nil
}

// parseScore parses a sorted-set score as Redis formats it ("1700000000123",
// or in exponent form from some versions) into whole milliseconds.
func parseScore(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f > 1<<62 || f < -(1<<62) {
		return 0, fmt.Errorf("score %q is not a number of milliseconds", s)
	}
	return int64(f), nil
}

// keys returns every key of the namespace: the partitioned sets and the
// unpartitioned ones of earlier versions.
func (s *Scheduler) keys() []string {
	keys := []string{s.legacyTimers, s.legacyInflight}
	for p := range hourglass.Partitions {
		keys = append(keys, s.timersKey(p), s.inflightKey(p))
	}
	return keys
}

// Destroy deletes the namespace's keys (every partition's timers and
// in-flight sets, and the unpartitioned ones of earlier versions), with
// every timer in them: for tests and for retiring a namespace. It connects
// on its own, so it works before or after Close. Idempotent.
func (s *Scheduler) Destroy(ctx context.Context) error {
	client, _, err := connect(ctx, s.cfg.URL)
	if err != nil {
		return fmt.Errorf("redis: destroy: %w", err)
	}
	defer client.Close()
	if err := client.Del(ctx, s.keys()...).Err(); err != nil {
		return fmt.Errorf("redis: destroy namespace %s: %w", s.cfg.Namespace, err)
	}
	return nil
}
