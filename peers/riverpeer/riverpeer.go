// Package riverpeer runs River (github.com/riverqueue/river, a PostgreSQL job
// queue) as a peer system in hourglass's benchmark: what a user who closes
// unpaid orders with River instead of hourglass would run, behind the same
// engine and the same workload as hourglass's own delay mechanisms.
//
// # How River is used
//
// Every timer is one River job of kind JobKind, inserted with InsertMany and
// InsertOpts.ScheduledAt at the deadline, in the tables of Config.Schema
// (Open creates the schema and runs River's migrations into it with
// rivermigrate). Run starts a River client whose worker hands the job's one
// timer to deliver; an error from deliver makes River retry the job after
// its retry policy's delay.
//
// A job scheduled in the future is inserted in state "scheduled". River's
// job scheduler, a maintenance service that runs on the elected leader
// client every 5 s (maintenance.JobSchedulerIntervalDefault; the interval is
// the unexported Config.schedulerInterval, which only River's own tests
// set), makes "available" every scheduled job due within the next interval,
// keeping its scheduled_at, and notifies the producers of those already due.
// A producer fetches available jobs whose scheduled_at has passed when
// notified (at most every FetchCooldown) and otherwise every
// FetchPollInterval. So a job scheduled 5 s or more ahead is mostly worked
// within one FetchPollInterval of its deadline; one scheduled less than 5 s
// ahead may become due before the next pass reaches it and then waits for
// that pass: up to 5 s minus how far ahead it was scheduled. The
// benchmark's default 2 s timeouts are in that second case (up to 3 s).
// The passes are not exactly 5 s apart either (4.6 s to 5.4 s between two
// passes' ends on the shared benchmark machine), and a job due in the gap
// between one pass's look-ahead and the next pass waits for that pass too:
// a few hundred milliseconds for a few percent of the jobs.
//
// River can cancel a job only by its id, which this package would have to
// keep beside the order id; it does not, so a paid order's job still runs
// and its close is a no-op (the Scheduler is not a hourglass.Canceler).
//
// # Settings
//
// Config's zero value runs River at its defaults (FetchCooldown 100 ms,
// FetchPollInterval 1 s, its retry policy of attempt⁴ seconds), with the 100
// workers of River's getting-started example (River has no default for
// QueueConfig.MaxWorkers) and pgxpool's default pool. Tuned is the best the
// documented river.Config fields allow for this use (see the Tuned comment).
package riverpeer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/hourglass/hourglass"
)

// Defaults of Config.
const (
	URLDefault    = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	SchemaDefault = "hourglass_river"
	// MaxWorkersDefault is the MaxWorkers of River's getting-started
	// example; River itself requires a value.
	MaxWorkersDefault = 100
	// ShutdownTimeoutDefault is River's SoftStopTimeout here: how long Run,
	// once its context ended, lets jobs in progress finish before their
	// contexts are cancelled (River's own default is to wait forever).
	ShutdownTimeoutDefault = 8 * time.Second
	// JobKind is the River job kind of an order's deadline.
	JobKind = "hourglass_order_deadline"
	// ConnectTimeout bounds Open's connection, schema and migration steps.
	ConnectTimeout = 30 * time.Second
)

// Config configures a Scheduler. The zero value of every River setting means
// River's own default.
type Config struct {
	// URL is the PostgreSQL URL, as pgxpool.ParseConfig takes it.
	URL string
	// Schema holds River's tables (river.Config.Schema and
	// rivermigrate.Config.Schema); Open creates it and migrates it. Runs
	// sharing a database use different ones. A lowercase SQL identifier of
	// at most 46 bytes.
	Schema string
	// FetchCooldown is river.Config.FetchCooldown: the least time between
	// two fetches of available jobs (River's default: 100 ms, minimum 1 ms).
	FetchCooldown time.Duration
	// FetchPollInterval is river.Config.FetchPollInterval: how often the
	// producer fetches without being notified (River's default: 1 s,
	// minimum 1 ms).
	FetchPollInterval time.Duration
	// MaxWorkers is river.QueueConfig.MaxWorkers of the default queue: the
	// most jobs worked at once (1 to 10,000; default MaxWorkersDefault).
	MaxWorkers int
	// RetryPolicy is river.Config.RetryPolicy: when a job whose delivery
	// failed runs again (River's default: attempt⁴ seconds later).
	RetryPolicy river.ClientRetryPolicy
	// ShutdownTimeout is river.Config.SoftStopTimeout (default
	// ShutdownTimeoutDefault).
	ShutdownTimeout time.Duration
	// MaxConns is the pgx pool's size (default: pgxpool's, the larger of 4
	// and the number of CPUs), unless the URL sets pool_max_conns.
	MaxConns int32
	// DropOnClose makes Close drop the schema with every job in it: for
	// benchmark runs and tests, whose schemas are used once.
	DropOnClose bool
	Logger      *slog.Logger
}

// Tuned returns the best settings River documents for closing orders at
// their deadline, on url and schema: the producers poll for due jobs every
// 50 ms instead of every second (FetchPollInterval, documented minimum 1 ms;
// 50 ms matches the asynq peer's tuned polls and keeps the load of an idle
// poll modest on a shared machine) and fetch at most every 10 ms after a
// notification instead of 100 ms (FetchCooldown, minimum 1 ms), 200 workers
// instead of 100, a 16-connection pool, and a failed delivery retried after
// 0.5 s doubling to at most 5 s (the engine's own backoff) instead of after
// 1 s, 16 s, 81 s and so on. The job scheduler's 5 s interval has no public
// setting.
func Tuned(url, schema string) Config {
	return Config{
		URL:               url,
		Schema:            schema,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		MaxWorkers:        200,
		MaxConns:          16,
		RetryPolicy:       backoff{first: 500 * time.Millisecond, max: 5 * time.Second},
	}
}

// schemaName is what Schema may be: a lowercase SQL identifier that needs
// no quoting, at most 46 bytes (River's limit, which leaves room for its
// prefixed names within PostgreSQL's 63).
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,45}$`)

// Validate returns an error naming the field and its allowed range for a
// value out of range; zero values are valid (the defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Schema != "" && !schemaName.MatchString(c.Schema) {
		errs = append(errs, fmt.Errorf("riverpeer: Schema must be a lowercase SQL identifier (a-z, 0-9, _; at most 46 bytes), got %q", c.Schema))
	}
	if c.FetchCooldown != 0 && (c.FetchCooldown < river.FetchCooldownMin || c.FetchCooldown > time.Minute) {
		errs = append(errs, fmt.Errorf("riverpeer: FetchCooldown must be between %s and 1m, got %s", river.FetchCooldownMin, c.FetchCooldown))
	}
	if c.FetchPollInterval != 0 && (c.FetchPollInterval < river.FetchPollIntervalMin || c.FetchPollInterval > time.Hour) {
		errs = append(errs, fmt.Errorf("riverpeer: FetchPollInterval must be between %s and 1h, got %s", river.FetchPollIntervalMin, c.FetchPollInterval))
	}
	if c.MaxWorkers < 0 || c.MaxWorkers > 10000 {
		errs = append(errs, fmt.Errorf("riverpeer: MaxWorkers must be between 1 and 10000, got %d", c.MaxWorkers))
	}
	if c.ShutdownTimeout < 0 || c.ShutdownTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("riverpeer: ShutdownTimeout must be between 1ms and 1h, got %s", c.ShutdownTimeout))
	}
	if c.MaxConns < 0 || c.MaxConns > 1000 {
		errs = append(errs, fmt.Errorf("riverpeer: MaxConns must be between 1 and 1000, got %d", c.MaxConns))
	}
	return errors.Join(errs...)
}

// Scheduler is River behind hourglass.Scheduler. Safe for concurrent use;
// Run may be called again after it returned.
type Scheduler struct {
	cfg    Config
	log    *slog.Logger
	pool   *pgxpool.Pool
	insert *river.Client[pgx.Tx] // insert-only: no workers, no maintenance
}

var _ hourglass.Scheduler = (*Scheduler)(nil)

// Open connects to PostgreSQL, creates Config.Schema if it does not exist
// and migrates River's tables into it. It returns an error for an invalid
// Config, an unreachable database or a failed migration. Opening the same
// schema twice (two consumers) is safe.
func Open(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.URL = cmp.Or(cfg.URL, URLDefault)
	cfg.Schema = cmp.Or(cfg.Schema, SchemaDefault)
	cfg.MaxWorkers = cmp.Or(cfg.MaxWorkers, MaxWorkersDefault)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, ShutdownTimeoutDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("riverpeer: bad PostgreSQL URL: %w", err)
	}
	if cfg.MaxConns > 0 && !strings.Contains(cfg.URL, "pool_max_conns") {
		poolCfg.MaxConns = cfg.MaxConns
	}
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("riverpeer: connect to %s: %w", poolCfg.ConnConfig.Host, err)
	}
	s := &Scheduler{cfg: cfg, log: cfg.Logger, pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	s.insert, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: cfg.Schema, Logger: cfg.Logger})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("riverpeer: insert client: %w", err)
	}
	return s, nil
}

// migrate creates the schema and runs River's migrations into it. Two
// processes migrating the same schema at once may collide: the tests and
// the benchmark open one schema from one goroutine at a time.
func (s *Scheduler) migrate(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.cfg.Schema}.Sanitize()); err != nil {
		return fmt.Errorf("riverpeer: create schema %s: %w", s.cfg.Schema, err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(s.pool), &rivermigrate.Config{Schema: s.cfg.Schema, Logger: s.log})
	if err != nil {
		return fmt.Errorf("riverpeer: migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riverpeer: migrate schema %s: %w", s.cfg.Schema, err)
	}
	return nil
}

// Info implements hourglass.Scheduler: River keeps the jobs in PostgreSQL,
// so a crash of this process loses none of them.
func (s *Scheduler) Info() hourglass.SchedulerInfo {
	return hourglass.SchedulerInfo{Name: "river", Feed: hourglass.FeedOutbox, Durable: true}
}

// deadlineArgs is the job of one order's deadline.
type deadlineArgs struct {
	OrderID    int64 `json:"order_id"`
	DeadlineMs int64 `json:"deadline_ms"`
}

// Kind implements river.JobArgs.
func (deadlineArgs) Kind() string { return JobKind }

// Schedule implements hourglass.Scheduler: it inserts one job per timer, all
// in one InsertMany, and returns once PostgreSQL has committed them.
// Scheduling an order twice inserts two jobs; the second close is a no-op.
func (s *Scheduler) Schedule(ctx context.Context, timers []hourglass.DueItem) error {
	if len(timers) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(timers))
	for i, t := range timers {
		params[i] = river.InsertManyParams{
			Args:       deadlineArgs{OrderID: t.ID, DeadlineMs: hourglass.UnixMilli(t.At)},
			InsertOpts: &river.InsertOpts{ScheduledAt: t.At},
		}
	}
	if _, err := s.insert.InsertMany(ctx, params); err != nil {
		return fmt.Errorf("riverpeer: insert %d jobs: %w", len(timers), err)
	}
	return nil
}

// worker delivers the timer of one job.
type worker struct {
	river.WorkerDefaults[deadlineArgs]
	deliver hourglass.Deliver
}

// Work implements river.Worker.
func (w *worker) Work(ctx context.Context, job *river.Job[deadlineArgs]) error {
	return w.deliver(ctx, []hourglass.DueItem{{ID: job.Args.OrderID, At: hourglass.FromUnixMilli(job.Args.DeadlineMs)}})
}

// Run implements hourglass.Scheduler: it runs a River client working the
// default queue until ctx ends, then stops it: jobs in progress get
// ShutdownTimeout to finish before their contexts are cancelled, which
// fails them into a retry. It returns an error if the client cannot start
// or stops by itself.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{deliver: deliver})
	client, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Schema:            s.cfg.Schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.cfg.MaxWorkers}},
		Workers:           workers,
		FetchCooldown:     s.cfg.FetchCooldown,
		FetchPollInterval: s.cfg.FetchPollInterval,
		RetryPolicy:       s.cfg.RetryPolicy,
		SoftStopTimeout:   s.cfg.ShutdownTimeout,
		Logger:            s.log,
	})
	if err != nil {
		return fmt.Errorf("riverpeer: client: %w", err)
	}
	// Stopped explicitly below: cancelling Start's context would stop the
	// client too, but without a bound on how long Stop may take.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("riverpeer: start client on schema %s: %w", s.cfg.Schema, err)
	}
	select {
	case <-ctx.Done():
	case <-client.Stopped():
		return fmt.Errorf("riverpeer: the River client on schema %s stopped by itself", s.cfg.Schema)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout+10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		s.log.Warn("riverpeer: stop client", "schema", s.cfg.Schema, "err", err)
	}
	return nil
}

// Close implements hourglass.Scheduler: it drops the schema if DropOnClose
// and closes the pool. Run must have returned.
func (s *Scheduler) Close() error {
	var err error
	if s.cfg.DropOnClose {
		ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
		defer cancel()
		if _, e := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.cfg.Schema}.Sanitize()+" CASCADE"); e != nil {
			err = fmt.Errorf("riverpeer: drop schema %s: %w", s.cfg.Schema, e)
		}
	}
	s.pool.Close()
	return err
}

// backoff is a river.ClientRetryPolicy: the first retry after first, each
// next one after twice as long, at most max.
type backoff struct{ first, max time.Duration }

// NextRetry implements river.ClientRetryPolicy.
func (b backoff) NextRetry(job *rivertype.JobRow) time.Time {
	n := len(job.Errors) // errors before this attempt's, as River's own policy counts
	return time.Now().Add(min(b.first<<min(n, 20), b.max))
}
