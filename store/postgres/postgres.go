// Package postgres is the shared Store: a PostgreSQL (13 or later) database
// that several hourglass processes may use at once. It makes no
// single-process assumption: every check-then-write is one conditional
// statement or holds a row lock, "now" is the database server's clock read
// inside the statement that needs it, the policy is read inside each create,
// deliveries fan out with INSERT … SELECT from the subscriptions, and other
// processes' new deliveries and orders arrive through LISTEN/NOTIFY. It is a
// hourglass.ClusterStore: membership and partition leases (sqlq.Cluster's
// SQL), and the created orders announced to the other nodes (cluster.go).
//
// Order writes (create, pay, cancel/ship/complete, extend, close), the named
// timers' (arm, cancel, fire) and webhook delivery attempts are
// group-committed: concurrent calls in one process share one transaction,
// run by the one write algorithm of store/internal/batch over batch.go's
// statements, pipelined in a few round trips. Everything else is one short
// transaction on the pool. Commits are durable: synchronous_commit is left as the server
// has it (on by default).
package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hourglass/hourglass"
	redactURL "github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/stored"
	dbunavailable "github.com/hourglass/hourglass/store/internal/unavailable"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/hourglass/hourglass/store/migrate"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Config.
const (
	// MaxConnsDefault is the pool size: the group-commit writer holds one
	// connection while a batch runs and reads and the other writes share
	// the rest.
	// PostgreSQL's throughput peaks at a few active connections per server
	// core, and several hourglass processes share the server's
	// max_connections (100 by default), so a small pool is both faster and
	// kinder than one connection per request.
	MaxConnsDefault = 10
	// MaxBatchDefault is the most writes group-committed in one transaction.
	MaxBatchDefault = 512
	// ConnectTimeoutDefault bounds each connection attempt when the URL has
	// no connect_timeout.
	ConnectTimeoutDefault = 5 * time.Second
	// MinServerVersion is the oldest PostgreSQL accepted (server_version_num):
	// 13 brings DROP DATABASE … WITH (FORCE) and the planner features the
	// queries count on.
	MinServerVersion = 130000
)

// writeTimeout bounds one group commit, so a server that stopped answering
// (a half-open TCP connection) fails the batch as unavailable instead of
// blocking its callers for ever.
const writeTimeout = 30 * time.Second

// writers is the number of group-commit goroutines. One: batches of two
// writers lock the same product rows (a hot SKU, or any overlap among many)
// and wait for each other's commit, which halves each batch without
// overlapping any work. Measured here (BenchmarkCreateOrderHotSKU, 128
// callers): one writer 9,300 creates/s, two 6,200; many SKUs the same.
const writers = 1

// Config configures Open. The zero value of each field means its default.
type Config struct {
	// URL is postgres:// or postgresql://user:pass@host:port/db?sslmode=…
	// Required. Its password, whether in user:pass@ or in a parameter
	// (password, sslpassword, …), is never logged or put in an error.
	URL string
	// Schema, when set, is where every hourglass table, sequence, function
	// and migration record lives (serve --database-schema): the
	// connections' search_path is set to it alone, and it is created if
	// missing. hourglass can then share a database with a shop's own
	// tables (its orders, products and events) in other schemas. 1 to 63
	// bytes; it may not be combined with a search_path in URL. Empty or
	// "public" (the flag's default) sets nothing: the URL's search_path,
	// the role's or the server's (normally public) applies.
	Schema string
	// MaxConns is the pool size (default MaxConnsDefault). One more
	// connection, outside the pool, listens for other processes'
	// deliveries and created orders.
	MaxConns int
	// MaxBatch is the most writes group-committed in one transaction
	// (default MaxBatchDefault).
	MaxBatch int
	// Clock, when set (tests), gives "now" to writes instead of the
	// database server's clock. Production leaves it nil. The cluster's
	// membership and leases ignore it: they are timed by the server's
	// clock, the one every process sharing the database reads.
	Clock hourglass.Clock
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Outbox makes every created order, and every arming of a named
	// timer, also write its timer to the timer outbox, in the same
	// transaction (see hourglass.Outbox).
	Outbox bool
	// Observe, if set, is called after every group commit with the number of
	// writes it held and how long it took, commit included.
	Observe func(writes int, commit time.Duration)
	// AnnounceWithin, when positive, leaves out of the created-orders
	// NOTIFY the orders due later than it after their creation, and the
	// named timers due later than it after their arming (see
	// store.Options.AnnounceWithin); a batch with none sends none.
	AnnounceWithin time.Duration
	// IdleTxTimeout, when positive, is every session's
	// idle_in_transaction_session_timeout: the server ends a session idle
	// inside a transaction this long (a process paused mid-transaction),
	// releasing its row locks for the other processes.
	IdleTxTimeout time.Duration
	// CommitGather, when positive, lets the group-commit writer wait up
	// to this long for more API writes while clients write concurrently
	// and other live nodes share the database (the last cluster read
	// through this store value listed one: writer.Config.Gather and
	// Shared): fewer, larger transactions, less CPU per write for the
	// server and this process, at the cost of up to this much latency per
	// write under load. A node alone never waits. Zero: no wait. Closes
	// never wait.
	CommitGather time.Duration
	// ObserveRetry, if set, is called each time a transaction or statement
	// is run again after a deadlock ("deadlock", 40P01) or a serialization
	// failure ("serialization", 40001). It must be safe for concurrent use.
	ObserveRetry func(reason string)
	// ObserveFanoutPending, if set, is told the number of rows of
	// fanout_pending (close batches whose webhook deliveries are deferred)
	// at each look of the fan-out loop (about every second, and after a
	// burst). It is called from one goroutine.
	ObserveFanoutPending func(n int)
	// ObserveNoticeRejected, if set, is called for each notice on the
	// store's NOTIFY channels that hourglass did not send (an unreadable
	// payload; see cluster.go), with the channel: created, deliveries or
	// requests. It must be safe for concurrent use.
	ObserveNoticeRejected func(channel string)
	// beforeFanOut, if set, is called by the fan-out loop before each deferred
	// fan-out; the package's tests hold it to see what was deferred.
	beforeFanOut func()
	// beforeTx, if set, is called before each transaction of the
	// group-commit writer with the number of writes it runs; the package's
	// tests count a failed batch's transactions with it.
	beforeTx func(writes int)
}

// Validate reports a configuration error, naming the field. It does not
// connect.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("postgres: Config.URL is required (postgres://user:password@host:port/database)")
	}
	if _, err := parseURL(c.URL); err != nil {
		return err
	}
	if c.MaxConns < 0 || c.MaxConns > 1000 {
		return fmt.Errorf("postgres: Config.MaxConns must be 0..1000, got %d", c.MaxConns)
	}
	if c.MaxConns != 0 && c.MaxConns < writers+1 {
		return fmt.Errorf("postgres: Config.MaxConns must be at least %d (the group-commit writer and a reader), got %d", writers+1, c.MaxConns)
	}
	if c.MaxBatch < 0 || c.MaxBatch > 100000 {
		return fmt.Errorf("postgres: Config.MaxBatch must be 0..100000, got %d", c.MaxBatch)
	}
	if c.Schema != "" && c.Schema != "public" {
		if len(c.Schema) > 63 || strings.ContainsRune(c.Schema, 0) || !utf8.ValidString(c.Schema) {
			return fmt.Errorf("postgres: --database-schema %q: want 1 to 63 bytes of UTF-8 (a PostgreSQL identifier)", c.Schema)
		}
		if strings.HasPrefix(strings.ToLower(c.Schema), "pg_") {
			return fmt.Errorf("postgres: --database-schema %q: names starting with pg_ are reserved by PostgreSQL", c.Schema)
		}
		if u, err := url.Parse(c.URL); err == nil && u.Query().Has("search_path") {
			return fmt.Errorf("postgres: --database-schema %q and the URL's search_path both name where hourglass's tables are: give one", c.Schema)
		}
	}
	return nil
}

// parseURL checks the URL's form and returns it parsed for messages.
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("postgres: Config.URL is not a valid URL (%s); want postgres://user:password@host:port/database", scrub(err.Error(), raw))
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("postgres: Config.URL %s: scheme must be postgres:// or postgresql://, got %q", redact(raw), u.Scheme)
	}
	return u, nil
}

// redact returns raw with its secrets (user:password@, ?password= and every
// parameter named like a password) masked, for messages.
func redact(raw string) string { return redactURL.URL(raw) }

// scrub removes the URL's secrets from msg, wherever a library put them.
func scrub(msg, raw string) string { return redactURL.Scrub(msg, raw) }

// The store implements the whole contract: it fails to compile when it
// implements less.
var _ hourglass.Database = (*Store)(nil)

// Store is the PostgreSQL implementation of hourglass.Database. It is safe
// for concurrent use, by many goroutines and many processes on one database.
type Store struct {
	// Store is the SQL written once for the paths that are not the group
	// commit (store/internal/sqlq): stats, outbox, event-log cursors, ….
	*sqlq.Store
	// Cluster is the cluster tables' SQL written once: membership,
	// leases and PruneNodes.
	sqlq.Cluster

	cfg      Config
	log      *slog.Logger
	pool     *pgxpool.Pool
	where    string // "user@host:port/db", for messages
	schema   string // the schema the tables are in (current_schema())
	orderSeq string // the orders.id sequence, schema-qualified
	channel  string // the NOTIFY channel of deliveries, of this database and schema
	// createdChannel is the NOTIFY channel of created orders (see cluster.go),
	// scoped like channel; origin names this store value in its payloads.
	createdChannel string
	// requestsChannel is timer_requests' NOTIFY channel (requests.go);
	// requestsWritten fires on its notifications.
	requestsChannel string
	requestsWritten chan struct{}
	origin          string
	// quiet holds the group commit's announcements while this store
	// value's node is alone in its cluster (quiet.go).
	quiet quietNotices

	// Writes are the group-committed writes (store/internal/batch): orders,
	// timers and delivery attempts.
	batch.Writes
	// w is the group-commit writer (store/internal/writer; the batches'
	// statements are batch.go's). It also wakes the delivery engine.
	w    *writer.Writer[*batch.Op]
	wg   sync.WaitGroup // listener and fanOut
	stop context.CancelFunc

	policy stored.PolicyCache
	// fanOut creates the deliveries close batches left in fanout_pending
	// (fanout.go).
	fanOut  *fanout.Loop
	watches watchers        // WatchCreated's
	closed  <-chan struct{} // closed by Close

	closeOnce sync.Once
	// rejected counts and logs the notices hourglass did not send.
	rejected *rejects
}

// Open connects to cfg.URL, checks the server (version 13 or later, the
// login, the permissions), applies pending migrations and starts the
// group-commit writers and the NOTIFY listener. Close must be called to stop
// them. Errors are one line that says what to fix, without the password.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	if err := s.lookUpNames(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	if err := s.checkPrivileges(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	bg, stop := context.WithCancel(context.Background())
	s.stop, s.closed = stop, bg.Done()
	s.Writes = batch.Writes{Queue: s.submit, ReadOrder: s.Order}
	s.w = writer.New(writer.Config[*batch.Op]{
		Name: "postgres", Log: s.log, Writers: writers, MaxBatch: s.cfg.MaxBatch, Retry: retryPolicy(), Gather: s.cfg.CommitGather, Shared: s.Store.Shared,
		Scrub: func(msg string) string { return scrub(msg, s.cfg.URL) }, Probe: s.probeWrite, ProbeInterval: time.Second,
		Observe: s.cfg.Observe, ObserveRetry: s.cfg.ObserveRetry, BeforeTx: s.cfg.beforeTx,
	}, dialect{s})
	s.fanOut = s.newFanOut()
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.fanOut.Run(bg) }()
	ready := make(chan struct{})
	go s.listen(bg, ready)
	select {
	case <-ready:
	case <-ctx.Done():
	}
	return s, nil
}

// connect validates cfg, opens the pool and checks that the server is
// reachable, lets us in and is recent enough.
func connect(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.MaxConns = cmp.Or(cfg.MaxConns, MaxConnsDefault)
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, MaxBatchDefault)
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		msg := "could not be parsed"
		if inner := errors.Unwrap(err); inner != nil {
			msg = inner.Error()
		}
		return nil, fmt.Errorf("postgres: Config.URL %s is not a valid PostgreSQL URL: %s", redact(cfg.URL), scrub(msg, cfg.URL))
	}
	pc.MaxConns = int32(cfg.MaxConns)
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = ConnectTimeoutDefault
	}
	if d := cfg.IdleTxTimeout; d > 0 {
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(d.Milliseconds(), 1), 10)
	}
	if cfg.Schema != "" && cfg.Schema != "public" {
		pc.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize()
	}
	// The planner takes an index wherever one serves (unless the URL says
	// otherwise). pgx prepares each statement once a connection, and
	// PostgreSQL keeps the generic plan it costs after five executions for
	// the connection's life; costed on a table that was small and never
	// analyzed (autovacuum off, a new table's first minute) or analyzed
	// while small, "id = ANY($1)" is a sequential scan, which the table
	// outgrows: at 5,000 orders/s each lock of a batch read every order
	// (docs/benchmarks/postgres-speed.md). TestWriterPlansUseIndexes holds
	// every statement of the write path to an index path. No JIT either
	// (unless the URL says otherwise): a statement whose only path is a
	// sequential scan (the 64 leases, a shop's table) is costed above
	// jit_above_cost once sequential scans are disabled, and compiling it
	// took a second each time; hourglass's statements are short.
	for name, value := range map[string]string{"enable_seqscan": "off", "jit": "off"} {
		if _, ok := pc.ConnConfig.RuntimeParams[name]; !ok {
			pc.ConnConfig.RuntimeParams[name] = value
		}
	}
	// Sessions are in UTC (unless the URL says otherwise), so that a
	// source's TIMESTAMP deadlines, which hold UTC, compare with now() as
	// the shop meant (hourglass's own times are unix ms, zone-free).
	if _, ok := pc.ConnConfig.RuntimeParams["timezone"]; !ok {
		if _, ok := pc.ConnConfig.RuntimeParams["TimeZone"]; !ok {
			pc.ConnConfig.RuntimeParams["timezone"] = "UTC"
		}
	}
	s := &Store{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), requestsWritten: make(chan struct{}, 1)}
	s.rejected = &rejects{log: s.log, clock: hourglass.SystemClock{}, observe: cfg.ObserveNoticeRejected}
	s.Store = sqlq.New(sqlDialect, sqlDB{s})
	s.Cluster = s.Store.Cluster()
	s.where = fmt.Sprintf("%s@%s/%s", pc.ConnConfig.User, net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port))), pc.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, s.startupError("connect", err)
	}
	s.pool = pool
	var (
		version int
		sync    string
		schema  *string
	)
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('synchronous_commit'), current_schema()`).Scan(&version, &sync, &schema); err != nil {
		pool.Close()
		return nil, s.startupError("connect", err)
	}
	if version < MinServerVersion {
		pool.Close()
		return nil, fmt.Errorf("postgres: the server at %s is PostgreSQL %d.%d; hourglass needs %d or later: upgrade the server",
			s.host(), version/10000, version%10000, MinServerVersion/10000)
	}
	if schema == nil && cfg.Schema != "" && cfg.Schema != "public" {
		if schema, err = s.createSchema(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	if schema == nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %s: no schema of the search_path exists (current_schema() is NULL); create it or fix the URL's search_path", s.where)
	}
	s.schema = *schema
	if sync == "off" || sync == "local" {
		s.log.Warn("postgres: synchronous_commit is not on: an acknowledged write may be lost in a crash", "synchronous_commit", sync)
	}
	return s, nil
}

func (s *Store) host() string {
	_, rest, _ := strings.Cut(s.where, "@")
	h, _, _ := strings.Cut(rest, "/")
	return h
}

// startupError turns a connection or permission failure at start-up into one
// line that says what to fix.
func (s *Store) startupError(op string, err error) error {
	user, rest, _ := strings.Cut(s.where, "@")
	host, db, _ := strings.Cut(rest, "/")
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		pe := &pgconn.PgError{Code: pe.Code, Message: scrub(oneLine(pe.Message), s.cfg.URL)}
		switch pe.Code {
		case "28P01":
			return fmt.Errorf("postgres: %s: the server at %s refused the login of user %q: wrong password (28P01); fix the URL's user and password", op, host, user)
		case "28000":
			return fmt.Errorf("postgres: %s: the server at %s refused the login of user %q: %s (28000); create the role WITH LOGIN or fix pg_hba.conf", op, host, user, pe.Message)
		case "3D000":
			return fmt.Errorf("postgres: %s: database %q does not exist on %s (3D000); create it (CREATE DATABASE %s) or fix the URL's path", op, db, host, pgx.Identifier{db}.Sanitize())
		case "42501":
			return fmt.Errorf("postgres: %s: user %q lacks a permission in database %q: %s (42501); GRANT CREATE, USAGE ON SCHEMA %s TO %s (or run hourglass once as the schema's owner)", op, user, db, pe.Message, pgx.Identifier{cmp.Or(s.schema, "<schema>")}.Sanitize(), pgx.Identifier{user}.Sanitize())
		case "53300":
			return fmt.Errorf("postgres: %s: the server at %s has no connection left (53300): lower Config.MaxConns or raise max_connections", op, host)
		}
		return fmt.Errorf("postgres: %s: %s: %s (%s)", op, s.where, pe.Message, pe.Code)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %s: %w", op, s.where, err)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		cause := err
		if inner := errors.Unwrap(ce); inner != nil {
			cause = inner
		}
		// pgconn wraps a nil error when the first answer is not
		// PostgreSQL's: "received unexpected message: %!w(<nil>)".
		text := strings.ReplaceAll(scrub(oneLine(cause.Error()), s.cfg.URL), ": %!w(<nil>)", "")
		switch {
		case isTLSError(err):
			return fmt.Errorf("postgres: %s: TLS with the server at %s failed (%s); %s", op, host, text, tlsHint(s.cfg.URL, err))
		case strings.Contains(text, "received unexpected message") || strings.Contains(text, "protocol version too low"):
			return fmt.Errorf("postgres: %s: the server at %s is not a PostgreSQL server: it answered in another protocol (%s); check the URL's port (PostgreSQL listens on 5432, MySQL on 3306)", op, host, text)
		}
		return fmt.Errorf("postgres: %s: cannot reach the server at %s (%s); check the URL's host and port and that PostgreSQL is running", op, host, text)
	}
	return fmt.Errorf("postgres: %s: %s: %s", op, s.where, scrub(oneLine(err.Error()), s.cfg.URL))
}

// errTLSRefused is pgconn's text when the server answers no to TLS.
const errTLSRefused = "server refused TLS connection"

// isTLSError reports whether a connect failed in TLS: the server refused
// it, or its certificate did not verify.
func isTLSError(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
		rh tls.RecordHeaderError
		al tls.AlertError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) ||
		errors.As(err, &rh) || errors.As(err, &al) || strings.Contains(err.Error(), errTLSRefused)
}

// tlsHint says what to change for a TLS failure err with the sslmode of
// rawURL (libpq's default, prefer, when it has none).
func tlsHint(rawURL string, err error) string {
	mode := "prefer"
	if u, perr := url.Parse(rawURL); perr == nil && u.Query().Get("sslmode") != "" {
		mode = u.Query().Get("sslmode")
	}
	if strings.Contains(err.Error(), errTLSRefused) {
		return fmt.Sprintf("sslmode=%s requires TLS and the server does not offer it: turn ssl on in the server's postgresql.conf (with a certificate), or set sslmode=disable in the URL (unencrypted: only on a trusted network)", mode)
	}
	return fmt.Sprintf("the server's certificate did not verify: sslmode=%s wants it signed by a CA in sslrootcert=/path/ca.crt (else the system's) and, with verify-full, naming the URL's host (an IP address needs an IP SAN); fix the certificate or the URL's host, give sslrootcert, or use sslmode=require (encrypted, not verified)", mode)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// createSchema creates Config.Schema, which does not exist yet, and returns
// it as current_schema() now names it. A role that may not create schemas
// gets a line saying what to grant or create.
func (s *Store) createSchema(ctx context.Context) (*string, error) {
	_, err := s.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.cfg.Schema}.Sanitize())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P06") {
		err = nil // another process created it at the same moment
	}
	if err != nil {
		if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
			return nil, fmt.Errorf("postgres: %s may not create the schema %q (--database-schema): create it for hourglass's role (CREATE SCHEMA %s AUTHORIZATION %s) or GRANT CREATE ON DATABASE %s TO %s",
				s.where, s.cfg.Schema, pgx.Identifier{s.cfg.Schema}.Sanitize(), pgx.Identifier{s.pool.Config().ConnConfig.User}.Sanitize(),
				pgx.Identifier{s.pool.Config().ConnConfig.Database}.Sanitize(), pgx.Identifier{s.pool.Config().ConnConfig.User}.Sanitize())
		}
		return nil, s.startupError("create the schema", err)
	}
	var schema *string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return nil, s.startupError("create the schema", err)
	}
	s.log.Info("postgres: created the schema for hourglass's tables", "schema", s.cfg.Schema)
	return schema, nil
}

// lookUpNames reads the names that depend on the search_path: the orders
// sequence and the NOTIFY channels (scoped to database and schema, so two
// hourglass deployments on one server do not wake each other), and draws
// the store value's origin.
func (s *Store) lookUpNames(ctx context.Context) error {
	var db, schema string
	err := s.pool.QueryRow(ctx, `SELECT pg_get_serial_sequence('orders', 'id'), current_database(), current_schema()`).Scan(&s.orderSeq, &db, &schema)
	if err != nil {
		return s.startupError("read the schema", err)
	}
	s.channel = channelName("hourglass_deliveries_", db, schema)
	s.createdChannel = channelName("hourglass_created_", db, schema)
	s.requestsChannel = requestsChannel(db, schema)
	s.origin = rand.Text()[:10]
	return nil
}

// checkPrivileges makes a user that can connect but not write (a database
// migrated by its owner, the tables not granted) fail at Open with the GRANT
// to run, rather than at the first write. It covers every table the
// migrations create (migrate.Tables, so a new table is covered without a
// hand list) and every sequence those tables own (their identities), as
// pg_class has them in the store's schema; tables of other applications
// sharing the schema are not its business.
func (s *Store) checkPrivileges(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	rows, err := s.pool.Query(ctx, `WITH t AS (
	SELECT c.oid, c.relname FROM pg_class c
	WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
	AND c.relkind IN ('r', 'p') AND c.relname = ANY($1)
)
SELECT t.relname, false FROM t
WHERE NOT (has_table_privilege(t.oid, 'SELECT') AND has_table_privilege(t.oid, 'INSERT')
	AND has_table_privilege(t.oid, 'UPDATE') AND has_table_privilege(t.oid, 'DELETE'))
UNION
SELECT q.relname, true FROM t
JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = t.oid AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
JOIN pg_class q ON q.oid = d.objid
-- CASE, not AND: the planner may test the privilege before the kind, and
-- has_sequence_privilege fails on a toast table.
WHERE CASE WHEN q.relkind = 'S' THEN NOT has_sequence_privilege(q.oid, 'USAGE') ELSE false END
ORDER BY 2, 1`, migrate.Tables(ms))
	if err != nil {
		return s.startupError("check privileges", err)
	}
	var tables, sequences []string
	var (
		name     string
		sequence bool
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &sequence}, func() error {
		if sequence {
			sequences = append(sequences, name)
		} else {
			tables = append(tables, name)
		}
		return nil
	})
	if err != nil {
		return s.startupError("check privileges", err)
	}
	if len(tables)+len(sequences) > 0 {
		var what []string
		if len(tables) > 0 {
			what = append(what, "write "+strings.Join(tables, ", "))
		}
		if len(sequences) > 0 {
			what = append(what, "use the sequences "+strings.Join(sequences, ", "))
		}
		user, _, _ := strings.Cut(s.where, "@")
		schema, role := pgx.Identifier{s.schema}.Sanitize(), pgx.Identifier{user}.Sanitize()
		return fmt.Errorf("postgres: user %q may not %s in %s; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s TO %s; GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO %s",
			user, strings.Join(what, " or "), s.where, schema, role, schema, role)
	}
	return nil
}

// channelName is a NOTIFY channel of a database and schema: prefix and a
// hash of the two names, to stay within 63 bytes (an identifier).
func channelName(prefix, db, schema string) string {
	h := uint64(14695981039346656037) // FNV-1a
	for _, c := range []byte(db + "\x00" + schema) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return fmt.Sprintf("%s%016x", prefix, h)
}

// Close stops the writers after the queued writes, stops the listener and
// closes the pool. It is idempotent and safe for concurrent use.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.w.Close()
		s.stop()
		s.wg.Wait()
		s.pool.Close()
	})
	return nil
}

// errClosed is returned by WatchCreated after Close.
var errClosed = &hourglass.Error{Code: hourglass.CodeUnavailable, Message: "store is closed"}

// nowArg is the "now" parameter of every statement: nil (NULL) in
// production, so the statement reads the server's clock, or the test
// clock's value in unix ms.
func (s *Store) nowArg() any {
	if s.cfg.Clock == nil {
		return nil
	}
	return hourglass.UnixMilli(s.cfg.Clock.Now())
}

// dbNow is the database's now in unix ms, read when the statement evaluates
// it: clock_timestamp(), not now() (the transaction's start, which may be
// earlier than a lock wait). Statements use it as COALESCE($n::bigint, dbNow)
// so a test clock can stand in.
const dbNow = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// classify says what an error means to the writer and to the retries of
// the other transactions: a serialization failure (40001) or a deadlock
// (40P01) rolled the transaction back and may run again; an unreachable
// database is unavailable.
func classify(err error) writer.Class {
	switch c := pgCode(err); {
	case c == "40001":
		return writer.Class{Kind: writer.Retry, Reason: "serialization"}
	case c == "40P01":
		return writer.Class{Kind: writer.Retry, Reason: "deadlock"}
	case unavailable(err):
		return writer.Class{Kind: writer.Unavailable}
	}
	return writer.Class{Kind: writer.OneWrite}
}

// unavailable reports an error that means the database could not be reached
// or could not make a write durable: a lost or refused connection, a server
// shutting down, no resources (disk full), a read-only standby.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	if writer.IsOutcomeUnknown(err) {
		return true
	}
	if c := pgCode(err); c != "" {
		return strings.HasPrefix(c, "08") || strings.HasPrefix(c, "53") || strings.HasPrefix(c, "58") ||
			c == "57P01" || c == "57P02" || c == "57P03" || c == "25006"
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ne) || errors.As(err, &ce) || errors.Is(err, pgconn.ErrConnClosed) ||
		pgconn.Timeout(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "closed pool")
}

// fail maps err of operation op to the contract's errors: *hourglass.Error
// values pass through; an unreachable database becomes CodeUnavailable with
// the one message of every store (store/internal/unavailable: the driver's
// error is logged here, never sent); anything else is wrapped with the
// package and op.
func (s *Store) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var he *hourglass.Error
	if errors.As(err, &he) {
		return err
	}
	if unavailable(err) {
		cause := errors.New(scrub(err.Error(), s.cfg.URL))
		s.log.Warn("postgres: database unavailable", "op", op, "err", cause)
		return dbunavailable.New("postgres: "+op, cause)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// tx runs fn in a transaction on a pooled connection, again after a
// serialization failure or deadlock (retryPolicy). fn may run more than
// once; it must not keep results of a failed attempt.
func (s *Store) tx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	return s.fail(op, s.retry(ctx, func() error { return pgx.BeginFunc(ctx, s.pool, fn) }))
}

// retry runs one autocommit statement (fn), again after a deadlock or
// serialization failure (retryPolicy); it returns fn's last error unmapped.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	return retryPolicy().Do(ctx, fn, classify, s.cfg.ObserveRetry)
}

// WriteHealth returns nil while order writes commit, or, from a write that
// failed because the database was unreachable until one commits again, an
// unavailable *hourglass.Error saying so (api.WriteHealthReporter: /readyz
// answers 503 meanwhile). While it is not nil a small write is tried every
// second, so it clears by itself when the database is back.
func (s *Store) WriteHealth() error { return s.w.Health() }

// probeWrite is the health tracker's small write.
func (s *Store) probeWrite(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO settings (name, value) VALUES ('write_probe', $1)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`, hourglass.SystemClock{}.Now().UTC().Format(time.RFC3339Nano))
	return s.fail("write probe", err)
}
