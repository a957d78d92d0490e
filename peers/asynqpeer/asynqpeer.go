// Package asynqpeer runs asynq (github.com/hibiken/asynq, a Redis task queue)
// as a peer system in hourglass's benchmark: what a user who closes unpaid
// orders with asynq instead of hourglass would run, behind the same engine
// and the same workload as hourglass's own delay mechanisms.
//
// # How asynq is used
//
// Every timer is one asynq task in the queue Config.Queue, enqueued with
// asynq.ProcessAt at the deadline and asynq.TaskID set to the order id, so
// publishing a timer twice (the outbox relay retrying) enqueues one task.
// Run starts an asynq.Server whose handler hands the one timer of each task
// to deliver; an error from deliver makes asynq retry the task after
// Config.RetryDelay. Cancel deletes the scheduled task (Inspector.DeleteTask).
//
// asynq keeps a scheduled task in a sorted set scored by ProcessAt in whole
// Unix seconds (rdb.Schedule stores processAt.Unix()), and its forwarder
// moves every task whose score is <= the current second to the pending list
// every DelayedTaskCheckInterval (5 s by default). A task scored by its
// deadline truncated to the second would therefore run up to a second early,
// which the store turns into a no-op close (and the order into one the
// sweeper has to close). Schedule rounds each deadline up to the next whole
// second instead, the finest resolution at which asynq never runs a task
// early; that rounding (0 to 1 s, 0.5 s on average) is part of what the
// benchmark measures. The workers then poll the pending list every
// TaskCheckInterval (1 s by default) when it was empty.
//
// # Settings
//
// Config's zero value runs asynq at its defaults (Concurrency = the number of
// CPUs, DelayedTaskCheckInterval 5 s, TaskCheckInterval 1 s, its retry
// backoff of 15 s and more). Tuned is the best the documented asynq.Config
// fields allow for this use (see the Tuned comment).
package asynqpeer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hourglass/hourglass"
)

// Defaults of Config.
const (
	URLDefault   = "redis://127.0.0.1:6379/0"
	QueueDefault = "hourglass"
	// EnqueuersDefault is how many tasks Schedule enqueues at once: asynq
	// enqueues one task per call (one Lua script each), so a batch of
	// timers from the outbox is spread over a few connections.
	EnqueuersDefault = 8
	// TaskType is the asynq task type of an order's deadline.
	TaskType = "hourglass:order-deadline"
	// PingTimeout bounds the reachability check of Open.
	PingTimeout = 5 * time.Second
)

// Config configures a Scheduler. The zero value of every asynq setting means
// asynq's own default.
type Config struct {
	// URL is the Redis URL (redis://[user:password@]host:port/db).
	URL string
	// Queue is the asynq queue the tasks go to; runs sharing a Redis use
	// different ones.
	Queue string
	// Concurrency is asynq.Config.Concurrency: the most tasks handled at
	// once (asynq's default: the number of CPUs).
	Concurrency int
	// DelayedTaskCheckInterval is asynq.Config.DelayedTaskCheckInterval: how
	// often scheduled and retry tasks that are due are moved to the pending
	// list (asynq's default: 5 s).
	DelayedTaskCheckInterval time.Duration
	// TaskCheckInterval is asynq.Config.TaskCheckInterval: how long the
	// workers wait before looking at an empty pending list again (asynq's
	// default: 1 s).
	TaskCheckInterval time.Duration
	// RetryDelay is asynq.Config.RetryDelayFunc: how long after a failed
	// delivery the task runs again (asynq's default: n⁴ + 15 + rand(30)·(n+1)
	// seconds after the n-th retry).
	RetryDelay asynq.RetryDelayFunc
	// ShutdownTimeout is asynq.Config.ShutdownTimeout: how long Run, once
	// its context ended, lets deliveries in progress finish before asynq
	// puts their tasks back in the pending list (asynq's default: 8 s).
	ShutdownTimeout time.Duration
	// Enqueuers is how many tasks Schedule enqueues at once, 1 to 64.
	Enqueuers int
	// DropOnClose makes Close delete the queue and every task in it: for
	// benchmark runs and tests, whose queues are used once.
	DropOnClose bool
	Logger      *slog.Logger
}

// Tuned returns the best settings asynq documents for closing orders at
// their deadline, on queue and url: the forwarder and the idle workers check
// every 50 ms instead of every 5 s and 1 s (asynq.Config documents both
// intervals and sets no minimum; the TaskCheckInterval comment warns that a
// low value adds load to Redis, which is 20 small scripts a second per
// server here), 64 concurrent handlers instead of one per CPU (a handler
// mostly waits for the database), and a failed delivery is retried after
// 0.5 s doubling to at most 5 s (the engine's own backoff) instead of after
// 15 s or more.
func Tuned(url, queue string) Config {
	return Config{
		URL:                      url,
		Queue:                    queue,
		Concurrency:              64,
		DelayedTaskCheckInterval: 50 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		RetryDelay: func(n int, _ error, _ *asynq.Task) time.Duration {
			return min(500*time.Millisecond<<min(n, 10), 5*time.Second)
		},
	}
}

// Validate returns an error naming the field and its allowed range for a
// value out of range; zero values are valid (the defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Concurrency < 0 || c.Concurrency > 10000 {
		errs = append(errs, fmt.Errorf("asynqpeer: Concurrency must be between 1 and 10000, got %d", c.Concurrency))
	}
	if c.Enqueuers < 0 || c.Enqueuers > 64 {
		errs = append(errs, fmt.Errorf("asynqpeer: Enqueuers must be between 1 and 64, got %d", c.Enqueuers))
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"DelayedTaskCheckInterval", c.DelayedTaskCheckInterval}, {"TaskCheckInterval", c.TaskCheckInterval}, {"ShutdownTimeout", c.ShutdownTimeout}} {
		if d.d < 0 || d.d > time.Hour {
			errs = append(errs, fmt.Errorf("asynqpeer: %s must be between 1ms and 1h, got %s", d.name, d.d))
		}
	}
	if strings.TrimSpace(c.Queue) != c.Queue {
		errs = append(errs, fmt.Errorf("asynqpeer: Queue %q has surrounding spaces", c.Queue))
	}
	return errors.Join(errs...)
}

// Scheduler is asynq behind hourglass.Scheduler. Safe for concurrent use;
// Run may be called again after it returned.
type Scheduler struct {
	cfg       Config
	log       *slog.Logger
	redis     *goredis.Client
	client    *asynq.Client
	inspector *asynq.Inspector
}

var (
	_ hourglass.Scheduler = (*Scheduler)(nil)
	_ hourglass.Canceler  = (*Scheduler)(nil)
)

// Open connects to Redis. It returns an error for an invalid Config or an
// unreachable Redis.
func Open(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.URL = cmp.Or(cfg.URL, URLDefault)
	cfg.Queue = cmp.Or(cfg.Queue, QueueDefault)
	cfg.Enqueuers = cmp.Or(cfg.Enqueuers, EnqueuersDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opt, err := goredis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("asynqpeer: bad Redis URL (want redis://[user:password@]host:port/db): %w", err)
	}
	// Maintenance notifications are a Redis Cloud feature; asking a plain
	// server for them at every connect only adds a round trip.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// asynq's own clients use a pool of 10 per CPU; the enqueuers, the
	// handlers' acknowledgements and the server's loops share this one.
	opt.PoolSize = max(opt.PoolSize, 2*cfg.Enqueuers+cmp.Or(cfg.Concurrency, 8))
	rdb := goredis.NewClient(opt)
	pingCtx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("asynqpeer: cannot use Redis at %s db %d: %w", opt.Addr, opt.DB, err)
	}
	return &Scheduler{
		cfg:       cfg,
		log:       cfg.Logger,
		redis:     rdb,
		client:    asynq.NewClientFromRedisClient(rdb),
		inspector: asynq.NewInspectorFromRedisClient(rdb),
	}, nil
}

// Info implements hourglass.Scheduler: asynq keeps the tasks in Redis, so a
// crash of this process loses none of them.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "asynq", Feed: hourglass.FeedOutbox, Durable: true}
}

// processAt is when asynq runs the task of a timer due at deadline: the
// deadline rounded up to the next whole second (see the package comment).
func processAt(deadline time.Time) time.Time {
	t := deadline.Truncate(time.Second)
	if t.Before(deadline) {
		t = t.Add(time.Second)
	}
	return t
}

// Schedule implements hourglass.Scheduler: it enqueues one task per timer,
// Enqueuers at a time, and returns once Redis has stored them all, or the
// first error. A timer whose order already has a task waiting (the same
// TaskID) is not enqueued again. Idempotent.
func (s *Scheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	workers := min(s.cfg.Enqueuers, len(timers))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(timers); i += workers {
				if errs[w] = s.enqueue(ctx, timers[i]); errs[w] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Scheduler) enqueue(ctx context.Context, t hourglass.DueItem) error {
	id := strconv.FormatInt(t.ID, 10)
	task := asynq.NewTask(TaskType, []byte(id+":"+strconv.FormatInt(hourglass.UnixMilli(t.At), 10)))
	_, err := s.client.EnqueueContext(ctx, task, asynq.Queue(s.cfg.Queue), asynq.TaskID(id), asynq.ProcessAt(processAt(t.At)))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil // the order's task is already waiting
	}
	if err != nil {
		return fmt.Errorf("asynqpeer: enqueue order %d: %w", t.ID, err)
	}
	return nil
}

// Cancel implements hourglass.Canceler: it deletes the orders' waiting
// tasks. A task that is already running or gone is left alone (its close is
// a no-op). It returns the first Redis error.
func (s *Scheduler) Cancel(_ context.Context, orderIDs []int64) error {
	for _, id := range orderIDs {
		err := s.inspector.DeleteTask(s.cfg.Queue, strconv.FormatInt(id, 10))
		if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
			return fmt.Errorf("asynqpeer: cancel order %d: %w", id, err)
		}
	}
	return nil
}

// Run implements hourglass.Scheduler: it runs an asynq.Server on the queue
// until ctx ends, then shuts it down: deliveries in progress get
// ShutdownTimeout to finish, after which asynq puts their tasks back in the
// pending list for the next consumer. It returns an error if the server
// cannot start.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	// Deliveries outlive ctx by up to ShutdownTimeout, so a close in
	// progress can commit; they are cancelled once the server is down.
	handlerCtx, stopHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHandlers()
	srv := asynq.NewServerFromRedisClient(s.redis, asynq.Config{
		Concurrency:              s.cfg.Concurrency,
		DelayedTaskCheckInterval: s.cfg.DelayedTaskCheckInterval,
		TaskCheckInterval:        s.cfg.TaskCheckInterval,
		RetryDelayFunc:           s.cfg.RetryDelay,
		ShutdownTimeout:          s.cfg.ShutdownTimeout,
		Queues:                   map[string]int{s.cfg.Queue: 1},
		BaseContext:              func() context.Context { return handlerCtx },
		Logger:                   logger{s.log},
		LogLevel:                 asynq.WarnLevel,
	})
	handler := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		t, err := decode(task.Payload())
		if err != nil {
			return fmt.Errorf("asynqpeer: %w: %w", err, asynq.SkipRetry)
		}
		return deliver(ctx, []hourglass.DueItem{t})
	})
	if err := srv.Start(handler); err != nil {
		return fmt.Errorf("asynqpeer: start server on queue %s: %w", s.cfg.Queue, err)
	}
	<-ctx.Done()
	srv.Shutdown()
	return nil
}

// decode parses a task payload, "orderID:deadlineUnixMs".
func decode(payload []byte) (hourglass.DueItem, error) {
	idText, msText, ok := strings.Cut(string(payload), ":")
	id, err1 := strconv.ParseInt(idText, 10, 64)
	ms, err2 := strconv.ParseInt(msText, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return hourglass.DueItem{}, fmt.Errorf("bad task payload %q (want orderID:deadlineMs)", payload)
	}
	return hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(ms)}, nil
}

// Close implements hourglass.Scheduler: it deletes the queue if DropOnClose
// and closes the Redis connections. Run must have returned.
func (s *Scheduler) Close() error {
	var err error
	if s.cfg.DropOnClose {
		err = s.dropQueue()
	}
	return errors.Join(err, s.redis.Close())
}

// dropQueue deletes the queue with its tasks (Inspector.DeleteQueue), then
// the counters asynq keeps per queue and DeleteQueue leaves behind
// (asynq:{queue}:processed and the like).
func (s *Scheduler) dropQueue() error {
	if err := s.inspector.DeleteQueue(s.cfg.Queue, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("asynqpeer: delete queue %s: %w", s.cfg.Queue, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), PingTimeout)
	defer cancel()
	// The queue name with the characters special in a SCAN pattern escaped.
	glob := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s.cfg.Queue)
	pattern := "asynq:{" + glob + "}:*"
	iter := s.redis.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("asynqpeer: list the keys of queue %s: %w", s.cfg.Queue, err)
	}
	for i := 0; i < len(keys); i += 1000 {
		if err := s.redis.Del(ctx, keys[i:min(i+1000, len(keys))]...).Err(); err != nil {
			return fmt.Errorf("asynqpeer: delete the keys of queue %s: %w", s.cfg.Queue, err)
		}
	}
	return nil
}

// logger hands asynq's log lines to slog.
type logger struct{ log *slog.Logger }

func (l logger) Debug(args ...any) { l.log.Debug("asynq: " + fmt.Sprint(args...)) }
func (l logger) Info(args ...any)  { l.log.Info("asynq: " + fmt.Sprint(args...)) }
func (l logger) Warn(args ...any)  { l.log.Warn("asynq: " + fmt.Sprint(args...)) }
func (l logger) Error(args ...any) { l.log.Error("asynq: " + fmt.Sprint(args...)) }

// Fatal logs at error level; asynq calls it only from Server.Run, which this
// package does not use, so it does not exit the process.
func (l logger) Fatal(args ...any) { l.log.Error("asynq: fatal: " + fmt.Sprint(args...)) }
