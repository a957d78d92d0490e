// Command hourglass runs the order-timeout service. It only parses flags,
// wires the packages together and handles signals.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/benchmark"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/migrate"
)

type cli struct {
	LogLevel    slog.Level        `help:"Log level: debug, info, warn, error." default:"info" env:"HOURGLASS_LOG_LEVEL"`
	Serve       serveCmd          `cmd:"" help:"Run the service."`
	Migrate     migrateCmd        `cmd:"" help:"Apply the database's pending schema migrations and exit (serve applies them too)."`
	Bench       benchmark.Command `cmd:"" help:"Measure delay mechanisms side by side under one workload."`
	Healthcheck healthcheckCmd    `cmd:"" help:"Probe a running server's /readyz: exit 0 when ready, 1 otherwise (the image's health check)."`
}

// databaseFlags name the database of record; serve and migrate share them.
type databaseFlags struct {
	DatabaseURL string `help:"The database: empty for SQLite in --data-dir; sqlite:///abs/path/file.db; postgres://user:pass@host:5432/db?sslmode=…; mysql://user:pass@host:3306/db?tls=…." env:"HOURGLASS_DATABASE_URL"`
	DataDir     string `help:"Directory of the embedded SQLite database (when --database-url is empty)." default:"./data" env:"HOURGLASS_DATA_DIR"`
	DBMaxConns  int    `help:"Connections in the PostgreSQL/MySQL pool (0: the store's default)." default:"0" env:"HOURGLASS_DB_MAX_CONNS"`
}

func (f databaseFlags) options(log *slog.Logger) (store.Options, error) {
	if f.DBMaxConns < 0 || f.DBMaxConns > 1000 {
		return store.Options{}, fmt.Errorf("--db-max-conns must be 0..1000, got %d", f.DBMaxConns)
	}
	if _, err := store.Kind(f.DatabaseURL); err != nil {
		return store.Options{}, fmt.Errorf("--database-url: %w", err)
	}
	return store.Options{URL: f.DatabaseURL, DataDir: f.DataDir, MaxConns: f.DBMaxConns, Logger: log}, nil
}

// location names the database for logs, without a password.
func (f databaseFlags) location() string {
	if f.DatabaseURL == "" {
		return f.DataDir
	}
	return store.Redact(f.DatabaseURL)
}

type serveCmd struct {
	Addr           string `help:"Address to listen on." default:"127.0.0.1:8080" env:"HOURGLASS_ADDR"`
	databaseFlags  `embed:""`
	APIToken       string        `help:"If set, every /v1 request must send 'Authorization: Bearer <token>'." env:"HOURGLASS_API_TOKEN"`
	AllowedHosts   []string      `help:"Without --api-token, the host names (comma-separated, no port) a /v1 request's Host header may name besides IP addresses and localhost; others get 403 (DNS rebinding)." env:"HOURGLASS_ALLOWED_HOSTS" sep:","`
	Window         time.Duration `help:"How far ahead deadlines are held in memory." default:"2m" env:"HOURGLASS_WINDOW"`
	LoadInterval   time.Duration `help:"How often the next window is paged in from the database." default:"30s" env:"HOURGLASS_LOAD_INTERVAL"`
	SweepInterval  time.Duration `help:"How often the compensation sweeper scans for missed deadlines." default:"1s" env:"HOURGLASS_SWEEP_INTERVAL"`
	SweepGrace     time.Duration `help:"How far past its deadline an order must be before the sweeper takes it (0 for none)." default:"2s" env:"HOURGLASS_SWEEP_GRACE"`
	ShutdownGrace  time.Duration `help:"How long in-flight requests may take to finish on SIGTERM." default:"10s" env:"HOURGLASS_SHUTDOWN_GRACE"`
	MaxConnections int           `help:"Most HTTP connections open at once (further clients wait); 0: 10000, or less if the open-file limit is lower." default:"0" env:"HOURGLASS_MAX_CONNECTIONS"`

	Delay       string `help:"Delay mechanism: wheel, heap, gotimer, sqlpoll, redis, rediskeyspace, rabbitmq, kafka, nats." default:"wheel" env:"HOURGLASS_DELAY"`
	delay.Flags `embed:""`
	// Webhook and alert settings live next to their wiring (webhooks.go,
	// alerts.go).
	webhookFlags   `embed:""`
	alertFlags     `embed:""`
	clusterFlags   `embed:""`
	retentionFlags `embed:""`
	debugFlags     `embed:""`
}

func main() {
	var c cli
	kctx := kong.Parse(&c,
		kong.Name("hourglass"),
		kong.Description("Closes unpaid orders exactly at their deadline and releases their stock."),
		kong.UsageOnError(),
	)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch kctx.Command() {
	case "serve":
		err = c.Serve.run(ctx, logger)
	case "migrate":
		err = c.Migrate.run(ctx, logger)
	case "bench":
		err = c.Bench.Run(ctx, logger, nil)
	default:
		err = fmt.Errorf("unknown command %q", kctx.Command())
	}
	if err != nil {
		logger.Error("hourglass: " + err.Error())
		os.Exit(1)
	}
}

func (s *serveCmd) run(ctx context.Context, log *slog.Logger) error {
	var clock hourglass.Clock = hourglass.SystemClock{}
	var m *metrics.Metrics
	if !delay.Valid(s.Delay) {
		return fmt.Errorf("--delay %q: want one of %s", s.Delay, strings.Join(delay.Names(), ", "))
	}
	if s.Delay == "sqlpoll" && s.SweepGrace > 0 && s.PollInterval >= s.SweepGrace {
		log.Warn("hourglass: --poll-interval is not below --sweep-grace: the sweeper will close orders before the poller does", "poll_interval", s.PollInterval, "sweep_grace", s.SweepGrace)
	}
	opts, err := s.databaseFlags.options(log)
	if err != nil {
		return err
	}
	opts.Outbox = delay.FeedOf(s.Delay) == hourglass.FeedOutbox
	// Other nodes learn of the orders this one creates that fall inside
	// their window (the same --window on every node); their loaders bring
	// the later ones.
	opts.AnnounceWithin = s.Window + time.Second
	// A node paused inside a transaction must not hold row locks past the
	// moment its partitions move to the others.
	opts.IdleTxTimeout = s.LeaseTTL
	opts.Observe = func(writes int, d time.Duration) {
		if m != nil {
			m.ObserveCommit(writes, d)
		}
	}
	opts.ObserveRetry = func(reason string) {
		if m != nil {
			m.ObserveRetry(reason)
		}
	}
	opts.ObserveFanoutPending = func(n int) {
		if m != nil {
			m.FanoutPending(n)
		}
	}
	openCtx, cancelOpen := context.WithTimeout(ctx, 30*time.Second)
	db, err := store.Open(openCtx, opts)
	cancelOpen()
	if err != nil {
		return err
	}
	defer db.Close()

	var eng *engine.Engine
	m = metrics.New(func() int { return eng.Pending() })
	// A node of a cluster times everything by the database's clock.
	self, err := s.clusterFlags.join(ctx, db, s.Addr, m, clock, log)
	if err != nil {
		return err
	}
	clock = self.clock

	openCtx, cancelOpen = context.WithTimeout(ctx, 15*time.Second)
	delayOpts := s.Flags.Options(db, clock, log)
	if self.m != nil {
		delayOpts.Parts = self.m.Owned // sqlpoll scans only this node's partitions
	}
	sched, err := delay.Open(openCtx, s.Delay, delayOpts)
	cancelOpen()
	if err != nil {
		return fmt.Errorf("--delay %s: %w", s.Delay, err)
	}
	defer sched.Close()

	// Alerts are evaluated and notified by one node of a cluster.
	s.alertFlags.deadLetterMax = s.DeadLetterMax
	s.alertFlags.clockSkew, s.alertFlags.maxDBClockSkew = self.skewSource(), s.MaxDBClockSkew
	alerts, err := s.alertFlags.wire(db, m, func() bool { return eng.Recovered() && self.leader() }, clock, log)
	if err != nil {
		return err
	}
	// Deliveries yield to a close path working through a burst; eng is set
	// below, before either runs.
	webhooks, err := s.webhookFlags.openWebhooks(db, alerts.webhookObserver(m), self, func() bool { return eng.Closing() }, clock, log)
	if err != nil {
		return err
	}
	// The cluster's leader prunes; every node bounds the timers it creates.
	pruner, timers, err := s.retentionFlags.openRetention(db, s.EventRetention, m, self, clock, log)
	if err != nil {
		return err
	}
	engCfg := engine.Config{
		Scheduler:     sched,
		Window:        s.Window,
		LoadInterval:  s.LoadInterval,
		SweepInterval: s.SweepInterval,
		SweepGrace:    sweepGrace(s.SweepGrace),
		Clock:         clock,
		Logger:        log,
		Observer:      alerts.engineObserver(m),
	}
	if own := self.ownership(); own != nil {
		engCfg.Ownership = own
	}
	eng, err = engine.New(db, engCfg)
	if err != nil {
		return err
	}
	srv, err := api.NewServer(api.Config{
		Store:        db,
		Engine:       self.ready(eng), // and the database servers' clocks agree
		Clock:        clock,
		Logger:       log,
		Token:        s.APIToken,
		AllowedHosts: s.AllowedHosts,
		Observer:     alerts.apiObserver(m),
		Metrics:      m.Handler(),
		Dashboard:    alerts.dashboard,
		Webhooks:     webhooks,
		Cluster:      self.view,
		Timers:       timers,
	})
	if err != nil {
		return err
	}

	maxConns, err := maxConnections(s.MaxConnections)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another process using it? set --addr)", s.Addr, err)
	}
	if s.APIToken == "" && !loopback(ln.Addr()) {
		log.Warn("hourglass: listening on a non-loopback address without --api-token: anyone who can reach it can read and change orders (browsers are held off by the origin and Host checks, other clients are not); set --api-token", "addr", ln.Addr().String())
	}
	ln = api.LimitConnections(ln, maxConns)
	debugCtx, stopDebug := context.WithCancel(context.Background())
	defer stopDebug()
	if err := startDebug(debugCtx, s.DebugAddr, log); err != nil {
		ln.Close()
		return err
	}
	httpSrv := newHTTPServer(srv.Handler(), log)
	// The membership runs until SIGTERM, and hands its partitions over
	// first thing then.
	nodeCtx, leave := context.WithCancel(context.Background())
	defer leave()
	left := self.run(nodeCtx)
	engCtx, stopEngine := context.WithCancel(context.Background())
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(engCtx) }()
	alertsStopped := alerts.start(engCtx)
	prunerStopped := startPruner(engCtx, pruner)
	// Webhook delivery stops first on shutdown, on its own context: its
	// attempts in flight are cancelled (and sent again after the next
	// start), so a slow receiver cannot hold the shutdown past its grace.
	hookCtx, stopHooks := context.WithCancel(context.Background())
	defer stopHooks()
	webhooksStopped := startWebhooks(hookCtx, webhooks, log)
	httpDone := make(chan error, 1)
	go func() { httpDone <- httpSrv.Serve(ln) }()
	log.Info("hourglass: listening", "url", "http://"+ln.Addr().String(), "database", s.location(), "delay", s.Delay)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("hourglass: shutting down")
	case err := <-httpDone:
		runErr = fmt.Errorf("http server: %w", err)
	case err := <-engDone:
		runErr = err
		engDone <- nil
	}
	leave()
	left()
	shutCtx, cancel := context.WithTimeout(context.Background(), s.ShutdownGrace)
	defer cancel()
	stopHooks()
	if err := httpSrv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("hourglass: http shutdown", "err", err)
	}
	stopEngine()
	alertsStopped()
	prunerStopped()
	if !waitUntil(shutCtx, webhooksStopped) {
		log.Warn("hourglass: webhook delivery did not stop within --shutdown-grace; closing anyway (its deliveries stay pending and are sent after the next start)")
	}
	if err := <-engDone; err != nil && runErr == nil {
		runErr = err
	}
	if err := db.Close(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr == nil {
		log.Info("hourglass: stopped")
	}
	return runErr
}

// loopback reports whether addr, a listener's address, accepts only
// connections from this machine (127.0.0.0/8, ::1); 0.0.0.0 and :: do not.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// waitUntil runs wait and reports whether it returned before ctx ended.
func waitUntil(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// MaxHeaderBytes bounds a request's header block: the API's headers are a
// token, a content type and an idempotency key, far below it.
const MaxHeaderBytes = 16 << 10

// newHTTPServer returns the API's http.Server: timeouts against slow
// clients and a small header limit (a larger header block is a 431).
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// maxConnectionsDefault is --max-connections' 0 when the open-file limit is
// high enough.
const maxConnectionsDefault = 10000

// maxConnections returns the connection limit for the flag's value n: n
// itself (1 to 1,000,000), or for 0 the default, lowered to leave 256 file
// descriptors (the database, brokers, webhook receivers) below the process's
// open-file limit.
func maxConnections(n int) (int, error) {
	if n < 0 || n > 1_000_000 {
		return 0, fmt.Errorf("--max-connections: must be between 1 and 1000000 (0 for the default), got %d", n)
	}
	if n > 0 {
		return n, nil
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < maxConnectionsDefault+256 {
		return max(int(lim.Cur)-256, 64), nil
	}
	return maxConnectionsDefault, nil
}

// sweepGrace maps the flag's 0 ("no grace") to the engine's "negative means none".
func sweepGrace(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

type migrateCmd struct {
	databaseFlags `embed:""`
	Status        bool `help:"Print the applied and pending migrations instead of applying them."`
}

func (c *migrateCmd) run(ctx context.Context, log *slog.Logger) error {
	opts, err := c.databaseFlags.options(log)
	if err != nil {
		return err
	}
	if c.Status {
		st, err := store.MigrationStatus(ctx, opts)
		if err != nil {
			return err
		}
		for _, m := range st {
			state := "pending"
			if m.Applied {
				state = "applied"
			}
			fmt.Printf("%04d_%s\t%s\n", m.Version, m.Name, state)
		}
		fmt.Printf("%d applied, %d pending\n", len(st)-migrate.Pending(st), migrate.Pending(st))
		return nil
	}
	n, err := store.Migrate(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("applied %d migrations to %s\n", n, c.location())
	return nil
}
