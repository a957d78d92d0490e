// Command hourglass runs the order-timeout service. It only parses flags
// into a node.Config (package node wires the packages together) and
// handles signals.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hourglass/hourglass/benchmark"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/source"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/migrate"
)

type cli struct {
	LogLevel    slog.Level        `help:"Log level: debug, info, warn, error." default:"info" env:"HOURGLASS_LOG_LEVEL"`
	Serve       serveCmd          `cmd:"" help:"Run the service."`
	Migrate     migrateCmd        `cmd:"" help:"Apply the database's pending schema migrations and exit (serve applies them too)."`
	Bench       benchmark.Command `cmd:"" help:"Measure delay mechanisms side by side under one workload."`
	Healthcheck healthcheckCmd    `cmd:"" help:"Probe a running server's /readyz: exit 0 when ready, 1 otherwise (the image's health check)."`
	// The commands of a running server's API (ops.go).
	Orders      ordersCmd      `cmd:"" help:"Read, extend and cancel orders on a running server."`
	Timers      timersCmd      `cmd:"" help:"Read, arm and cancel timers on a running server."`
	Deadletters deadlettersCmd `cmd:"" help:"List, retry and delete webhook dead letters on a running server."`
	Bulk        bulkCmd        `cmd:"" help:"List, follow and stop bulk actions on a running server."`
}

// databaseFlags name the database of record; serve and migrate share them.
type databaseFlags struct {
	DatabaseURL    string        `help:"The database: empty for SQLite in --data-dir; sqlite:///abs/path/file.db; postgres://user:pass@host:5432/db?sslmode=…; mysql://user:pass@host:3306/db?tls=…." env:"HOURGLASS_DATABASE_URL"`
	DataDir        string        `help:"Directory of the embedded SQLite database (when --database-url is empty)." default:"./data" env:"HOURGLASS_DATA_DIR"`
	DBMaxConns     int           `help:"Connections in the PostgreSQL/MySQL pool (0: the store's default)." default:"0" env:"HOURGLASS_DB_MAX_CONNS"`
	CommitGather   time.Duration `help:"PostgreSQL/MySQL, while other live nodes share the database: how long the group commit may wait for more API writes while clients write concurrently, until it has as many as its last batch and the writes that waited while it committed, as long as they keep coming (fewer, larger transactions: a node among several gets a share of the clients, and every commit costs the shared server the same); up to this much more latency per write under load. A node alone never waits. 0: no wait. Closes and fires never wait." default:"5ms" env:"HOURGLASS_COMMIT_GATHER"`
	DatabaseSchema string        `help:"PostgreSQL: the schema of every hourglass table, created if missing, so that hourglass shares a database with a shop's own tables (public: the URL's or server's search_path). MySQL: use the URL's database instead." default:"public" env:"HOURGLASS_DATABASE_SCHEMA"`
}

func (f databaseFlags) options(log *slog.Logger) (store.Options, error) {
	if f.DBMaxConns < 0 || f.DBMaxConns > 1000 {
		return store.Options{}, fmt.Errorf("--db-max-conns must be 0..1000, got %d", f.DBMaxConns)
	}
	if f.CommitGather < 0 || f.CommitGather > maxCommitGather {
		return store.Options{}, fmt.Errorf("--commit-gather must be 0..%s, got %s", maxCommitGather, f.CommitGather)
	}
	if _, err := store.Kind(f.DatabaseURL); err != nil {
		return store.Options{}, fmt.Errorf("--database-url: %w", err)
	}
	return store.Options{URL: f.DatabaseURL, DataDir: f.DataDir, MaxConns: f.DBMaxConns, Logger: log, Schema: f.DatabaseSchema, CommitGather: f.CommitGather}, nil
}

// maxCommitGather bounds --commit-gather: a wait meant to let concurrent
// clients' writes share a commit, not to hold them.
const maxCommitGather = 50 * time.Millisecond

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
	APIToken       string        `help:"If set, every /v1 request must send 'Authorization: Bearer <token>' with one of these tokens (comma-separated, so a token can be rotated: list the new and the old until every client has the new) or a --viewer-token." env:"HOURGLASS_API_TOKEN"`
	ViewerToken    string        `help:"Tokens (comma-separated) that read every /v1 route and the dashboard and write nothing: a write answers 403 forbidden. Needs --api-token; a token is in one of the two lists, not both." env:"HOURGLASS_VIEWER_TOKEN"`
	AllowedHosts   []string      `help:"Without --api-token, the host names (comma-separated, no port) a /v1 request's Host header may name besides IP addresses and localhost; others get 403 (DNS rebinding)." env:"HOURGLASS_ALLOWED_HOSTS" sep:","`
	Window         time.Duration `help:"How far ahead deadlines are held in memory." default:"2m" env:"HOURGLASS_WINDOW"`
	LoadInterval   time.Duration `help:"How often the next window is paged in from the database." default:"30s" env:"HOURGLASS_LOAD_INTERVAL"`
	SweepInterval  time.Duration `help:"How often the compensation sweeper scans for missed deadlines." default:"1s" env:"HOURGLASS_SWEEP_INTERVAL"`
	SweepGrace     time.Duration `help:"How far past its deadline an order must be before the sweeper takes it (0 for none)." default:"2s" env:"HOURGLASS_SWEEP_GRACE"`
	ShutdownGrace  time.Duration `help:"How long in-flight requests may take to finish on SIGTERM." default:"10s" env:"HOURGLASS_SHUTDOWN_GRACE"`
	MaxConnections int           `help:"Most HTTP connections open at once (further clients wait); 0: 10000, or less if the open-file limit is lower." default:"0" env:"HOURGLASS_MAX_CONNECTIONS"`

	Delay       string `help:"Delay mechanism: wheel, heap, gotimer, sqlpoll, redis, rediskeyspace, rabbitmq, kafka, nats." default:"wheel" env:"HOURGLASS_DELAY"`
	delay.Flags `embed:""`
	// Webhook, alert, cluster, retention and debug settings live in their
	// own files (webhooks.go, alerts.go, cluster.go, retention.go, debug.go).
	webhookFlags   `embed:""`
	alertFlags     `embed:""`
	clusterFlags   `embed:""`
	retentionFlags `embed:""`
	debugFlags     `embed:""`
	runtimeFlags   `embed:""` // runtime.go
	sourceFlags    `embed:""`
	eventSinkFlags `embed:""` // eventsinks.go

	// The payment check before closes (beforeclose.go).
	beforeCloseFlags `embed:""`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit status: 0 success, 1
// a failure of the command, 2 a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c cli
	kctx, code := parse(&c, args, stdout, stderr)
	if kctx == nil {
		return code
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	var err error
	switch cmd := kctx.Command(); cmd {
	case "serve":
		err = c.Serve.run(ctx, logger)
	case "migrate":
		err = c.Migrate.run(ctx, logger)
	case "bench":
		err = c.Bench.Run(ctx, logger, nil)
	default:
		if group, ok := c.opsGroup(cmd); ok {
			return runOps(ctx, kctx, group, stdout, stderr)
		}
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		logger.Error("hourglass: " + err.Error())
		return 1
	}
	return 0
}

// exitPanic carries kong's exit status (--help's 0, a parse error's) out of
// parse, so that kong never ends the process itself.
type exitPanic int

// parse parses args into c. It returns the kong context, or nil and the
// exit status when the command line was --help (0) or wrong (2, with kong's
// message and usage).
func parse(c *cli, args []string, stdout, stderr io.Writer) (kctx *kong.Context, code int) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(exitPanic)
			if !ok {
				panic(r)
			}
			kctx, code = nil, int(e)
			if code != 0 {
				code = 2
			}
		}
	}()
	parser, err := kong.New(c,
		kong.Name("hourglass"),
		kong.Description("Closes unpaid orders exactly at their deadline and releases their stock."),
		kong.UsageOnError(),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitPanic(code)) }),
	)
	if err != nil {
		fmt.Fprintf(stderr, "hourglass: %v\n", err)
		return nil, 2
	}
	kctx, err = parser.Parse(args)
	if err != nil {
		parser.Stdout = stderr // the usage too: stdout may be piped to a tool
		parser.FatalIfErrorf(err)
	}
	return kctx, 0
}

// run parses the flags into a node.Config and runs the node until ctx ends.
func (s *serveCmd) run(ctx context.Context, log *slog.Logger) error {
	gc, err := s.runtimeFlags.settings(os.Getenv)
	if err != nil {
		return err
	}
	cfg, err := s.config(log)
	if err != nil {
		return err
	}
	gc.apply(log)
	n, err := node.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Run(ctx)
}

// config returns the node.Config the flags describe, or an error naming
// the flag to fix.
func (s *serveCmd) config(log *slog.Logger) (node.Config, error) {
	if !delay.Valid(s.Delay) {
		return node.Config{}, fmt.Errorf("--delay %q: want one of %s", s.Delay, strings.Join(delay.Names(), ", "))
	}
	if s.Delay == "sqlpoll" && s.SweepGrace > 0 && s.PollInterval >= s.SweepGrace {
		log.Warn("hourglass: --poll-interval is not below --sweep-grace: the sweeper will close orders before the poller does", "poll_interval", s.PollInterval, "sweep_grace", s.SweepGrace)
	}
	opts, err := s.databaseFlags.options(log)
	if err != nil {
		return node.Config{}, err
	}
	if err := s.clusterFlags.validate(); err != nil {
		return node.Config{}, err
	}
	alerts, err := s.alertFlags.config()
	if err != nil {
		return node.Config{}, err
	}
	webhooks, err := s.webhookFlags.config()
	if err != nil {
		return node.Config{}, err
	}
	retention, err := s.retentionFlags.config(s.EventRetention)
	if err != nil {
		return node.Config{}, err
	}
	maxConns, err := maxConnections(s.MaxConnections)
	if err != nil {
		return node.Config{}, err
	}
	sources, err := s.sourceFlags.sources()
	if err != nil {
		return node.Config{}, err
	}
	beforeClose, err := s.beforeCloseFlags.config(source.AsksBeforeClose(sources))
	if err != nil {
		return node.Config{}, err
	}
	sinks, err := s.eventSinkFlags.config()
	if err != nil {
		return node.Config{}, err
	}
	return node.Config{
		Addr:       s.Addr,
		Store:      opts,
		Delay:      s.Delay,
		DelayFlags: s.Flags,
		Engine: engine.Config{
			Window:        s.Window,
			LoadInterval:  s.LoadInterval,
			SweepInterval: s.SweepInterval,
			SweepGrace:    sweepGrace(s.SweepGrace),
		},
		Sources:            sources,
		SourceTailInterval: s.SourceTailInterval,
		SourceBlockedAlert: s.SourceBlockedAlert,
		Webhooks:           webhooks,
		Alerts:             alerts,
		Retention:          retention,
		TimerMax:           s.TimerMax,
		Cluster:            node.Cluster{NodeID: s.NodeID, LeaseTTL: s.LeaseTTL, MaxDBClockSkew: s.MaxDBClockSkew},
		Tokens:             tokenList(s.APIToken),
		ViewerTokens:       tokenList(s.ViewerToken),
		AllowedHosts:       s.AllowedHosts,
		MaxConnections:     maxConns,
		ShutdownGrace:      s.ShutdownGrace,
		DebugAddr:          s.DebugAddr,
		Logger:             log,
		BeforeClose:        beforeClose,
		EventSinks:         sinks,
	}, nil
}

// tokenList splits a token flag at its commas: "" is no token, and an empty
// item stays in the list for api.CheckTokens to refuse by its place. A token
// cannot hold a comma. White space around an item is dropped (as in
// "old, new"): a header cannot carry it.
func tokenList(flag string) []string {
	if flag == "" {
		return nil
	}
	items := strings.Split(flag, ",")
	for i, t := range items {
		items[i] = strings.TrimSpace(t)
	}
	return items
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
