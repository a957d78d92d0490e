// Package node is hourglass's composition root: it builds one node of the
// service (the store, the delay mechanism, the engine, webhook delivery,
// alerts and the dashboard, the retention pruner, the cluster membership
// and the HTTP API) from one Config, runs it, and shuts it down in order.
// cmd/hourglass parses flags into a Config; the tests, the benchmark and
// the harnesses build nodes with New too.
//
// It sits above every other package: it may import the root, the stores,
// the mechanisms (package delay), the engine, webhook, alert, dashboard,
// retention, cluster, metrics and api. Nothing imports it but commands and
// tests.
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/bulk"
	"github.com/hourglass/hourglass/cluster"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/metrics"
	"github.com/hourglass/hourglass/requests"
	"github.com/hourglass/hourglass/retention"
	"github.com/hourglass/hourglass/source"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/webhook"
)

// Defaults of Config.
const (
	// DelayDefault is the delay mechanism of an empty Config.Delay.
	DelayDefault = "wheel"
	// ShutdownGraceDefault is how long in-flight requests may take to
	// finish once Run's context ends.
	ShutdownGraceDefault = 10 * time.Second
	// MaxConnectionsDefault is the most HTTP connections open at once.
	MaxConnectionsDefault = 10000
	// MaxDBClockSkewDefault is Config.Cluster.MaxDBClockSkew's default.
	MaxDBClockSkewDefault = 100 * time.Millisecond
)

// Config configures a node. The zero value of each field means its
// default; the components' configs are theirs, validated by them, with the
// fields the node wires (clocks, loggers, observers, ownership, the
// mechanism) filled in by New.
type Config struct {
	// Addr is the API's listen address ("127.0.0.1:0" picks a port: see
	// Node.Addr).
	Addr string
	// Store names the database (URL, DataDir, MaxConns). New sets the
	// options a node decides: the outbox, the announcement horizon, the
	// idle transaction timeout and the metrics hooks.
	Store store.Options
	// Delay names the delay mechanism (default DelayDefault), DelayFlags
	// its settings.
	Delay      string
	DelayFlags delay.Flags
	// OpenDelay, when set, opens the mechanism instead of Delay, given
	// the options New would pass to delay.Open; DelayFeed is its feed.
	// For the benchmark's peers (River, asynq), which are no mechanism of
	// package delay but run behind the same node.
	OpenDelay func(ctx context.Context, o delay.Options) (hourglass.Scheduler, error)
	DelayFeed hourglass.Feed
	// Engine is the close path's config: Window, LoadInterval,
	// SweepInterval, SweepGrace and the like. Its Observer, when set, is
	// told what the engine does besides the node's metrics (a benchmark's
	// or a test's counts).
	Engine engine.Config
	// Sources are shops' own tables whose rows the node closes (package
	// source); SourceTailInterval how often each is read for new rows.
	Sources            []hourglass.Source
	SourceTailInterval time.Duration
	// SourceBlockedAlert is how long a source row may stay locked by the
	// shop before an ERROR and source_row_blocked (source.Config's
	// BlockedAlert).
	SourceBlockedAlert time.Duration
	// Webhooks is webhook delivery's config (Allow, Retry, Jitter, …).
	Webhooks webhook.Config
	// Alerts configures the alert rules and the dashboard.
	Alerts Alerts
	// Retention is the pruner's config; TimerMax bounds the timers that
	// may exist at once (retention.LimitTimers).
	Retention retention.Config
	TimerMax  int64
	// Cluster configures this node's membership of a shared database's
	// cluster (ignored on SQLite).
	Cluster Cluster
	// BeforeClose is the payment check before hourglass closes its own
	// orders (--before-close-url); the zero value checks nothing.
	BeforeClose BeforeClose
	// EventSinks are the --event-sink URLs: the event log is published to
	// each (package eventsink; see ValidateEventSink).
	EventSinks []string
	// Tokens (--api-token) read and write every /v1 route, ViewerTokens
	// (--viewer-token) only read; when there are tokens, every /v1 request
	// needs one. AllowedHosts are the host names a /v1 request may name
	// without tokens (api.Config; New refuses what api.CheckTokens does).
	Tokens       []string
	ViewerTokens []string
	AllowedHosts []string
	// MaxBodyMemory is api.Config's (0: its default). APIObserver, when
	// set, is told each request besides the node's metrics (a test's).
	MaxBodyMemory int64
	APIObserver   api.Observer
	// MaxConnections bounds the HTTP connections open at once (default
	// MaxConnectionsDefault).
	MaxConnections int
	// ShutdownGrace bounds the requests in flight, and webhook delivery's
	// stop, once Run's context ends (default ShutdownGraceDefault).
	ShutdownGrace time.Duration
	// DebugAddr, when set, serves Go's runtime profiles on a listener of
	// its own.
	DebugAddr string
	// Clock gives now (default the system clock); on a shared database
	// the node times everything by the database's clock instead.
	Clock  hourglass.Clock
	Logger *slog.Logger
}

// Cluster configures a node's membership (package cluster).
type Cluster struct {
	// NodeID is this node's name (default: the host name and a random
	// suffix).
	NodeID string
	// LeaseTTL is how long a partition lease lasts without renewal
	// (cluster.Config.LeaseTTL); it also bounds a transaction left idle.
	LeaseTTL time.Duration
	// MaxDBClockSkew is the most one database server's clock may run
	// ahead of another's (default MaxDBClockSkewDefault, at most 1m).
	MaxDBClockSkew time.Duration
}

// Node is one running hourglass node. Its exported fields are set by New
// and must not be replaced.
type Node struct {
	// Store is the database of record; Engine the close path; Webhooks
	// delivery and the webhook API; Membership the cluster membership (nil
	// on a store one process owns); Handler the HTTP API; Metrics the
	// Prometheus metrics.
	Store      hourglass.Database
	Engine     *engine.Engine
	Webhooks   *webhook.Service
	Membership *cluster.Membership
	Handler    http.Handler
	Metrics    *metrics.Metrics

	cfg       Config
	log       *slog.Logger
	sched     hourglass.Scheduler
	self      *member
	gate      *beforeclose.Gate // the payment check; nil: no --before-close-url nor a source's before_close
	alerts    *alerting
	pruner    *retention.Pruner
	applier   *requests.Applier // nil: the store does not apply timer requests
	sources   *source.Runner    // nil: no --sources
	sinks     *eventSinks       // --event-sink
	bulk      *bulk.Runner      // filtered bulk actions
	ln        net.Listener
	stopDebug context.CancelFunc
	ran       bool
}

// New opens the store (applying its migrations), joins the cluster, opens
// the delay mechanism and builds every component, and listens on
// cfg.Addr. Nothing runs until Run; Close releases what New opened. ctx
// bounds the opening (the store within 30 s, the mechanism and the join
// within 15 s each). Errors name what to fix.
func New(ctx context.Context, cfg Config) (_ *Node, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
		cfg.Logger = log
	}
	var clock hourglass.Clock = cmp.Or[hourglass.Clock](cfg.Clock, hourglass.SystemClock{})
	cfg.Delay = cmp.Or(cfg.Delay, DelayDefault)
	cfg.ShutdownGrace = cmp.Or(cfg.ShutdownGrace, ShutdownGraceDefault)
	cfg.MaxConnections = cmp.Or(cfg.MaxConnections, MaxConnectionsDefault)
	cfg.Cluster.MaxDBClockSkew = cmp.Or(cfg.Cluster.MaxDBClockSkew, MaxDBClockSkewDefault)
	if cfg.OpenDelay == nil && !delay.Valid(cfg.Delay) {
		return nil, fmt.Errorf("node: Delay %q: want one of %v", cfg.Delay, delay.Names())
	}
	if err := cfg.BeforeClose.Validate(); err != nil {
		return nil, err
	}
	if err := api.CheckTokens(cfg.Tokens, cfg.ViewerTokens); err != nil {
		return nil, err
	}
	if err := checkAddr("--addr", cfg.Addr); err != nil {
		return nil, err
	}
	if err := checkAddr("--debug-addr", cfg.DebugAddr); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()

	// The metrics exist before the store opens: its goroutines report to
	// them from the start (the fan-out loop's count).
	var eng *engine.Engine
	m := metrics.New(func() int {
		if eng == nil {
			return 0
		}
		return eng.Pending()
	})
	n.Metrics = m
	opts := cfg.Store
	opts.Logger = cmp.Or(opts.Logger, log)
	feed := delay.FeedOf(cfg.Delay)
	if cfg.OpenDelay != nil {
		feed = cfg.DelayFeed
	}
	opts.Outbox = feed == hourglass.FeedOutbox
	// Other nodes learn of the orders this one creates that fall inside
	// their window (the same Window on every node); their loaders bring
	// the later ones.
	opts.AnnounceWithin = cmp.Or(cfg.Engine.Window, engine.WindowDefault) + time.Second
	// A node paused inside a transaction must not hold row locks past the
	// moment its partitions move to the others.
	opts.IdleTxTimeout = cfg.Cluster.LeaseTTL
	opts.Observe = m.ObserveCommit
	opts.ObserveRetry = m.ObserveRetry
	opts.ObserveFanoutPending = m.FanoutPending
	opts.ObserveNoticeRejected = m.NoticeRejected
	openCtx, cancelOpen := context.WithTimeout(ctx, 30*time.Second)
	db, err := store.Open(openCtx, opts)
	cancelOpen()
	if err != nil {
		return nil, err
	}
	n.Store = db

	// A node of a cluster times everything by the database's clock.
	self, err := join(ctx, db, cfg.Addr, cfg.Cluster, m, clock, log)
	if err != nil {
		return nil, err
	}
	n.self, n.Membership = self, self.m
	clock = self.clock

	openCtx, cancelOpen = context.WithTimeout(ctx, 15*time.Second)
	delayOpts := cfg.DelayFlags.Options(db, clock, log)
	if self.m != nil {
		delayOpts.Parts = self.m.Owned // sqlpoll scans only this node's partitions
	}
	var sched hourglass.Scheduler
	if cfg.OpenDelay != nil {
		sched, err = cfg.OpenDelay(openCtx, delayOpts)
	} else {
		sched, err = delay.Open(openCtx, cfg.Delay, delayOpts)
	}
	cancelOpen()
	if err != nil {
		return nil, fmt.Errorf("--delay %s: %w", cfg.Delay, err)
	}
	n.sched = sched

	// The payment check before closes: one Gate per node.
	if n.gate, err = newBeforeClose(cfg.BeforeClose, cfg.Sources, db, m, clock, log); err != nil {
		return nil, err
	}
	// The event sinks publish the partitions this node owns.
	if n.sinks, err = newEventSinks(cfg.EventSinks, db, self, m, clock, log); err != nil {
		return nil, err
	}
	// Alerts are evaluated and notified by one node of a cluster.
	// The shops' own tables (--sources), checked against the database.
	if n.sources, err = openSources(ctx, cfg, db, self, n.gate, m, clock, log); err != nil {
		return nil, err
	}
	alerts, err := newAlerting(cfg.Alerts, db, m, self, cfg.Retention.DeadLetterMax, cfg.Cluster.MaxDBClockSkew, func() bool { return eng.Recovered() && self.leader() },
		anyFailing(gateFailures(cfg.BeforeClose, n.gate), sourceFailures(n.sources)), n.sinks.lagSource(), n.sources, clock, log)
	if err != nil {
		return nil, err
	}
	n.alerts = alerts
	// Deliveries yield to a close path working through a burst; eng is set
	// below, before either runs.
	whCfg := cfg.Webhooks
	whCfg.Clock, whCfg.Logger, whCfg.Observer, whCfg.Yield = clock, log, alerts.webhookObserver(m), func() bool { return eng.Closing() }
	if own := self.ownership(); own != nil {
		whCfg.Ownership = own
	}
	if whCfg.Allow.Len() == 0 {
		log.Info("hourglass: --webhook-allow is empty: webhooks cannot be created until hosts are listed")
	}
	if n.Webhooks, err = webhook.New(db, whCfg); err != nil {
		return nil, err
	}
	if n.bulk, err = newBulk(db, cfg.Cluster.NodeID, n.Webhooks, m, clock, log); err != nil {
		return nil, err
	}
	// The cluster's leader prunes; every node bounds the timers it creates.
	rCfg := cfg.Retention
	rCfg.Leader, rCfg.Clock, rCfg.Logger, rCfg.Observer = self.leader, clock, log, m
	if n.pruner, err = retention.New(db, rCfg); err != nil {
		return nil, err
	}
	timers, err := retention.LimitTimers(db, retention.TimerLimitConfig{Max: cfg.TimerMax, Clock: clock, Logger: log, Observer: m})
	if err != nil {
		return nil, err
	}
	engCfg := cfg.Engine
	engCfg.Scheduler, engCfg.Clock, engCfg.Logger, engCfg.Observer = sched, clock, log, alerts.engineObserver(m, cfg.Engine.Observer)
	engCfg.Node = self.nodeID()
	if cfg.BeforeClose.checksOrders(n.gate) {
		engCfg.Gate = n.gate
	}
	if own := self.ownership(); own != nil {
		engCfg.Ownership = own
	}
	if eng, err = engine.New(db, engCfg); err != nil {
		return nil, err
	}
	n.Engine = eng
	// Timers armed in shops' transactions (timer_requests): applied on
	// every node, announced on the store's due feed like the API's arms.
	if n.applier, err = requests.New(requests.Config{Store: db, Observer: alerts.requestObserver(m), Limit: timers, Clock: clock, Logger: log}); err != nil {
		return nil, err
	}
	srv, err := api.NewServer(api.Config{
		Store:         db,
		Engine:        self.ready(eng), // and the database servers' clocks agree
		Clock:         clock,
		Logger:        log,
		Tokens:        cfg.Tokens,
		ViewerTokens:  cfg.ViewerTokens,
		AllowedHosts:  cfg.AllowedHosts,
		Observer:      alerts.apiObserver(m, cfg.APIObserver),
		MaxBodyMemory: cfg.MaxBodyMemory,
		Metrics:       m.Handler(),
		Dashboard:     alerts.dashboard,
		Webhooks:      n.Webhooks,
		Cluster:       self.view,
		Timers:        timers,
		TimerRequests: db,
		Sources:       sourceBadRows(n.sources),
		History:       db,
		SourceRows:    sourceRows(n.sources),
		Bulk:          db,
		BulkWake:      n.bulk.Wake,
	})
	if err != nil {
		return nil, err
	}
	n.Handler = srv.Handler()

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen on %s: %w (is another process using it? set --addr)", cfg.Addr, err)
		}
		return nil, fmt.Errorf("listen on %s: %w (set --addr to an address of this host)", cfg.Addr, err)
	}
	if len(cfg.Tokens) == 0 && !loopback(ln.Addr()) {
		log.Warn("hourglass: listening on a non-loopback address without --api-token: anyone who can reach it can read and change orders (browsers are held off by the origin and Host checks, other clients are not); set --api-token", "addr", ln.Addr().String())
	}
	n.ln = api.LimitConnections(ln, cfg.MaxConnections)
	debugCtx, stopDebug := context.WithCancel(context.Background())
	n.stopDebug = stopDebug
	if err := startDebug(debugCtx, cfg.DebugAddr, log); err != nil {
		return nil, err
	}
	return n, nil
}

// Addr returns the address the API listens on.
func (n *Node) Addr() net.Addr { return n.ln.Addr() }

// Run serves the API and runs the engine, webhook delivery, alerts, the
// pruner and the membership until ctx ends (or the HTTP server or the
// engine fails), then shuts down in order: the membership hands its
// partitions over first; webhook delivery stops on its own context (its
// attempts in flight cancelled, sent again after the next start), so a
// slow receiver cannot hold the shutdown past ShutdownGrace; requests in
// flight get ShutdownGrace to finish; then the engine, alerts and the
// pruner stop and the store is closed. It returns nil after a shutdown
// ctx asked for, or the failure. Run is called at most once.
func (n *Node) Run(ctx context.Context) error {
	n.ran = true
	log := n.log
	defer n.stopDebug()
	httpSrv := newHTTPServer(n.Handler, log)
	// The membership runs until ctx ends, and hands its partitions over
	// first thing then.
	nodeCtx, leave := context.WithCancel(context.Background())
	defer leave()
	left := n.self.run(nodeCtx)
	engCtx, stopEngine := context.WithCancel(context.Background())
	defer stopEngine()
	engDone := make(chan error, 1)
	go func() { engDone <- n.Engine.Run(engCtx) }()
	alertsStopped := n.alerts.start(engCtx)
	prunerStopped := startPruner(engCtx, n.pruner)
	applierStopped := startApplier(engCtx, n.applier)
	gateStopped := startGate(engCtx, n.cfg.BeforeClose, n.gate)
	sourcesStopped := startSources(engCtx, n.sources)
	sinksStopped := n.sinks.start(engCtx)
	bulkStopped := startBulk(engCtx, n.bulk)
	// Webhook delivery stops first on shutdown, on its own context: its
	// attempts in flight are cancelled (and sent again after the next
	// start), so a slow receiver cannot hold the shutdown past its grace.
	hookCtx, stopHooks := context.WithCancel(context.Background())
	defer stopHooks()
	webhooksStopped := startWebhooks(hookCtx, n.Webhooks, log)
	httpDone := make(chan error, 1)
	go func() { httpDone <- httpSrv.Serve(n.ln) }()
	log.Info("hourglass: listening", "url", "http://"+n.ln.Addr().String(), "database", n.location(), "delay", n.cfg.Delay)

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
	shutCtx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownGrace)
	defer cancel()
	stopHooks()
	if err := httpSrv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("hourglass: http shutdown", "err", err)
	}
	stopEngine()
	alertsStopped()
	prunerStopped()
	applierStopped()
	gateStopped()
	sourcesStopped()
	sinksStopped()
	bulkStopped()
	if !waitUntil(shutCtx, webhooksStopped) {
		log.Warn("hourglass: webhook delivery did not stop within --shutdown-grace; closing anyway (its deliveries stay pending and are sent after the next start)")
	}
	if err := <-engDone; err != nil && runErr == nil {
		runErr = err
	}
	if err := n.Store.Close(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr == nil {
		log.Info("hourglass: stopped")
	}
	return runErr
}

// Close releases what New opened: the listener (when Run did not run),
// the delay mechanism and the store. Call it after Run returned, or
// instead of Run. It returns the store's error. Idempotent.
func (n *Node) Close() error {
	if n.stopDebug != nil {
		n.stopDebug()
	}
	if n.ln != nil && !n.ran {
		n.ln.Close()
	}
	if n.sched != nil {
		n.sched.Close()
	}
	if n.Store != nil {
		return n.Store.Close()
	}
	return nil
}

// location names the database for logs, without a password.
func (n *Node) location() string {
	if n.cfg.Store.URL == "" {
		return n.cfg.Store.DataDir
	}
	return store.Redact(n.cfg.Store.URL)
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

// startWebhooks runs the delivery engine until ctx ends; wait blocks until it
// has stopped (its attempts in flight cancelled).
func startWebhooks(ctx context.Context, svc *webhook.Service, log *slog.Logger) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			log.Error("hourglass: webhook delivery stopped", "err", err)
		}
	}()
	return func() { <-done }
}

// startApplier runs a until ctx ends (nothing when a is nil); wait blocks
// until it has stopped.
func startApplier(ctx context.Context, a *requests.Applier) (wait func()) {
	if a == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx) // returns nil when ctx ends; errors are logged and retried
	}()
	return func() { <-done }
}

// startPruner runs p until ctx ends; wait blocks until it has stopped.
func startPruner(ctx context.Context, p *retention.Pruner) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx) // returns nil when ctx ends; errors are logged and retried
	}()
	return func() { <-done }
}

// checkAddr returns an error naming flag when addr, if set, is not the
// host:port a listener needs: "8080" alone would otherwise fail to listen
// with a message that suggests another process holds the port.
func checkAddr(flag, addr string) error {
	if addr == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		hint := ""
		if _, err := strconv.ParseUint(addr, 10, 16); err == nil {
			hint = fmt.Sprintf(" (:%s listens on every interface, 127.0.0.1:%s on this host only)", addr, addr)
		}
		return fmt.Errorf("%s %q: want host:port, such as 127.0.0.1:8080 or :8080%s", flag, addr, hint)
	}
	return nil
}
