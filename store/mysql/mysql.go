// Package mysql is the hourglass.Database on MySQL 8.0+ and MariaDB 10.6+
// (InnoDB), through go-sql-driver/mysql and database/sql. Several processes
// may share one database: every check-then-write holds row locks taken in
// one global order (orders by id, then products by SKU), the policy and the
// webhook subscriptions are read inside each write, and time comes from the
// database server's clock.
//
// Order writes (create, pay, cancel/ship/complete, close) and named timer
// writes (arm, cancel, fire) are group-committed: concurrent calls in one
// process queue up and a few writer goroutines each take a batch, lock its
// rows, decide every write in Go in queue order (so a hot SKU's product row
// is read and written once per batch, not once per order), and write the
// batch with a handful of multi-row statements in one transaction: the
// algorithm of store/internal/batch, over batch.go's statements. Other writes are short transactions of their
// own. The package owns its schema (migrations/*.sql, applied by Open).
package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/unavailable"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
)

// Defaults of Config.
const (
	// MaxConnsDefault is the pool size when Config.MaxConns is 0. Writers
	// need writersDefault connections and every read is one short query, so
	// 16 serves a busy API while eight processes on one server stay far
	// below MySQL's default max_connections of 151.
	MaxConnsDefault = 16
	// MaxBatchDefault is the most order and timer writes group-committed in one
	// transaction when Config.MaxBatch is 0: large enough that a burst of
	// thousands of creates a second needs a few commits, small enough that a
	// batch's statements stay well under max_allowed_packet.
	MaxBatchDefault = 512
	// writersDefault is how many batches are in flight at once: one commits
	// (waits for the redo log flush) while the next locks and plans.
	writersDefault = 2
	// lockWaitTimeout bounds how long a statement waits for a row lock
	// (session innodb_lock_wait_timeout, seconds) before the batch retries.
	lockWaitTimeout = 10
	// batchTimeout bounds one batch transaction, retries included.
	batchTimeout = 60 * time.Second
	// retries is how many times a batch that hit a deadlock, a lock wait
	// timeout, a racing duplicate key or (Galera) a certification conflict
	// is run again before it fails. On Galera a hot row written from several
	// nodes at once loses certification often (one node wins each round),
	// hence more than a single server would need.
	retries = 16
)

// Reasons a transaction is run again, as Config.ObserveRetry receives them.
const (
	// RetryDeadlock is error 1213 on a single server: InnoDB's deadlock
	// detector chose this transaction.
	RetryDeadlock = "deadlock"
	// RetryCertification is error 1213 on a Galera node: the transaction
	// conflicted with another node's write, and either lost certification
	// at COMMIT or was aborted by that node's replicated write set while
	// it held a row lock the write set needed (a brute-force abort, which
	// surfaces on the next statement or at COMMIT). The error does not
	// tell a rare local InnoDB deadlock apart: on Galera it counts here.
	RetryCertification = "certification"
	// RetrySerialization is error 1020, "record has changed since last
	// read" (MariaDB's innodb_snapshot_isolation).
	RetrySerialization = "serialization"
	// RetryLockTimeout is error 1205, a row lock wait that timed out.
	RetryLockTimeout = "lock_timeout"
	// RetryDuplicateKey is error 1062 from a key another transaction
	// committed first (an idempotency key, a new row's key); the retry
	// reads the winner.
	RetryDuplicateKey = "duplicate_key"
)

// Minimum server versions.
const (
	minMySQL   = 8_00_00  // 8.0
	minMariaDB = 10_06_00 // 10.6
)

// Config configures Open. The zero value of each field means its default.
type Config struct {
	// URL is mysql://user:password@host:3306/database, optionally with
	// ?tls=true|false|skip-verify|preferred and &timeout=5s (dial timeout).
	// Required.
	URL string
	// MaxConns is the connection pool size (default MaxConnsDefault).
	MaxConns int
	// MaxBatch is the most order and timer writes group-committed in one transaction
	// (default MaxBatchDefault).
	MaxBatch int
	// Clock gives "now" to writes. nil (production) means the database
	// server's clock, read inside the transaction that makes each change;
	// tests pass a fake clock, whose value the same statements then bind.
	Clock hourglass.Clock
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Outbox makes every created order also write its timer to the
	// timer_outbox table in the same transaction (see hourglass.Outbox).
	Outbox bool
	// Observe, if set, is called after every group commit with the number
	// of writes it held and how long the transaction took.
	Observe func(writes int, commit time.Duration)
	// ObserveRetry, if set, is called each time a transaction or statement
	// is run again after losing a race, with the reason (RetryDeadlock,
	// RetryCertification, RetrySerialization, RetryLockTimeout,
	// RetryDuplicateKey). It is called from many goroutines at once (the
	// writers', the callers') and must be safe for concurrent use.
	ObserveRetry func(reason string)
	// ObserveFanoutPending, if set, is told the number of rows of
	// fanout_pending (close batches whose webhook deliveries are deferred)
	// at each look of the fan-out loop (about every second, and after a
	// burst). It is called from one goroutine.
	ObserveFanoutPending func(n int)
	// AnnounceWithin, when positive, leaves out of the order feed the
	// created orders due later than it after their creation (see
	// store.Options.AnnounceWithin); a batch with none writes no feed row.
	AnnounceWithin time.Duration
	// IdleTxTimeout, when positive, has the server end a session that sits
	// idle inside a transaction this long (rolling it back), so that a
	// process paused mid-transaction (SIGSTOP, a VM freeze) does not hold
	// its row locks over the other processes for longer: MariaDB's
	// idle_transaction_timeout. MySQL 8 has no such limit; there the
	// session's wait_timeout is set to it instead (and the pool drops idle
	// connections before that), which ends any idle session.
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
	// beforeFanOut, if set, is called by the fan-out loop before each deferred
	// fan-out; the package's tests hold it to see what was deferred.
	beforeFanOut func()
	// beforeTx, if set, is called before each transaction of a
	// group-commit writer with the number of writes it runs; the package's
	// tests count a failed batch's transactions with it.
	beforeTx func(writes int)
}

// Validate reports a configuration error, naming the field; it does not
// contact the server. The message never contains the password.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("mysql: URL is required (mysql://user:password@host:3306/database)")
	}
	if _, err := myurl.Parse(c.URL); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	if c.MaxConns < 0 || c.MaxConns > 1000 {
		return fmt.Errorf("mysql: MaxConns must be 0..1000, got %d", c.MaxConns)
	}
	if c.MaxBatch < 0 || c.MaxBatch > 10000 {
		return fmt.Errorf("mysql: MaxBatch must be 0..10000, got %d", c.MaxBatch)
	}
	return nil
}

// server describes the server Open connected to.
type server struct {
	mariaDB bool
	version string // as SELECT VERSION() says
	num     int    // major*10000 + minor*100 + patch
	// galera: the server is a node of a Galera cluster (wsrep_on=ON).
	galera bool
	// syncWait is the server's global wsrep_sync_wait (Galera).
	syncWait int
	// conf is the pool's driver configuration, session settings included
	// (the sources' pool is made from it: sources.go).
	conf *gomysql.Config
}

func (v server) String() string {
	if v.mariaDB {
		return "MariaDB " + v.version
	}
	return "MySQL " + v.version
}

// The store implements the whole contract: it fails to compile when it
// implements less.
var _ hourglass.Database = (*Store)(nil)

// Store is the MySQL implementation of hourglass.Database. It is safe for
// concurrent use, and any number of Store values, in any number of
// processes, may share one database.
type Store struct {
	// Store is the SQL written once for the paths that are not the group
	// commit (store/internal/sqlq): stats, outbox, event-log cursors, ….
	*sqlq.Store
	// Writes are the group-committed writes (store/internal/batch): orders,
	// timers, delivery attempts.
	batch.Writes
	// Cluster is the cluster tables' SQL written once: membership,
	// leases and PruneNodes.
	sqlq.Cluster

	cfg    Config
	clock  hourglass.Clock // nil: the database server's clock
	log    *slog.Logger
	db     *sql.DB
	server server
	// w is the group-commit writer (store/internal/writer; the batches'
	// statements are batch.go's). It also wakes the delivery engine after this
	// store value's commits that created deliveries.
	w      *writer.Writer[*batch.Op]
	done   sync.WaitGroup
	policy stored.PolicyCache
	// fanOut creates the deliveries close batches left in fanout_pending
	// (fanout.go); stop ends it.
	fanOut *fanout.Loop
	stop   context.CancelFunc
	// origin marks this store value's order_feed rows (cluster.go).
	origin string
	// sourcePool runs the sources' statements (sources.go).
	sourcePool sourcePool

	closeOnce sync.Once
	closeErr  error
}

// Open connects to cfg.URL, checks the server (MySQL 8.0+ or MariaDB 10.6+),
// applies the pending migrations (once, under a lock every process takes),
// checks that the user may write every table and starts the writers.
// Start-up errors are one line saying what to fix (the URL, the host and
// port, the login, the database, a GRANT, the server's version), without
// the password. Close must be called.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	db, srv, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := migrateDB(ctx, db, cfg); err != nil {
		db.Close()
		return nil, err
	}
	if err := checkPrivileges(ctx, db, cfg); err != nil {
		db.Close()
		return nil, err
	}
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, MaxBatchDefault)
	s := &Store{cfg: cfg, clock: cfg.Clock, log: cmp.Or(cfg.Logger, slog.Default()), db: db, server: srv, origin: newOrigin()}
	s.Store = sqlq.New(sqlDialect, sqlDB{s})
	s.Writes = batch.Writes{Queue: s.submit, ReadOrder: s.Order, MaxKeyBytes: 255}
	s.Cluster = s.Store.Cluster()
	writers := writersDefault
	if n := cmp.Or(cfg.MaxConns, MaxConnsDefault); n < 4 {
		writers = 1 // leave connections to the reads
	}
	s.w = writer.New(writer.Config[*batch.Op]{
		Name: "mysql", Log: s.log, Writers: writers, MaxBatch: cfg.MaxBatch, Retry: retryPolicy(), Gather: cfg.CommitGather, Shared: s.Store.Shared,
		Clock: s.clock, Probe: s.probeWrite, ProbeInterval: time.Second,
		Observe: cfg.Observe, ObserveRetry: cfg.ObserveRetry, BeforeTx: cfg.beforeTx,
	}, dialect{s})
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.fanOut = s.newFanOut()
	s.done.Add(1)
	go func() { defer s.done.Done(); s.fanOut.Run(bg) }()
	s.log.Debug("mysql: opened", "server", srv.String(), "url", myurl.Redact(cfg.URL))
	return s, nil
}

// Migrate connects to cfg.URL and applies the pending migrations, returning
// how many it applied. It is safe to run from several processes at once.
// Errors as Open's.
func Migrate(ctx context.Context, cfg Config) (applied int, err error) {
	db, _, err := connect(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return migrateDB(ctx, db, cfg)
}

// Close waits for the queued order writes, stops the writers and closes the
// connections. Writes after Close fail with unavailable. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.w.Close()
		s.stop()
		s.done.Wait()
		s.closeErr = s.db.Close()
		s.sourcePool.close()
	})
	return s.closeErr
}

// connect validates cfg, opens the pool with the session settings every
// statement relies on, and checks the server. Its errors are one line.
func connect(ctx context.Context, cfg Config) (*sql.DB, server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, server{}, err
	}
	mc, _ := myurl.Parse(cfg.URL) // validated above
	log := cmp.Or(cfg.Logger, slog.Default())
	mc.Logger = driverLogger{log}
	// interpolateParams: one round trip per statement instead of three
	// (prepare, execute, close). clientFoundRows: RowsAffected counts the
	// rows matched, so a compare-and-set reads "did it match".
	mc.InterpolateParams = true
	mc.ClientFoundRows = true
	mc.Loc = time.UTC
	mc.Params = map[string]string{
		"time_zone":                "'+00:00'",
		"innodb_lock_wait_timeout": strconv.Itoa(lockWaitTimeout),
	}
	probe, err := openPool(mc, 1, time.Minute)
	if err != nil {
		return nil, server{}, err
	}
	srv, binlogFormat, err := inspect(ctx, probe, cfg, mc)
	probe.Close()
	if err != nil {
		return nil, server{}, err
	}
	// Strict mode, whatever the server's default: a value that does not fit
	// is an error, never silently truncated.
	mc.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'"
	// Galera applies another node's commits a little after they return:
	// without a causality check a read on this node may miss a write the
	// client saw committed on another (an order created through one
	// hourglass node, paid through the next). wsrep_sync_wait makes reads
	// (1) and UPDATE/DELETE statements (2) first wait until this node has
	// applied every write set committed in the cluster before they began;
	// INSERTs need no wait: a conflicting one fails certification. A
	// stricter global setting is kept.
	if srv.galera {
		mc.Params["wsrep_sync_wait"] = strconv.Itoa(srv.syncWait | 3)
	}
	// READ COMMITTED: locking reads lock the rows they find, not the gaps
	// between them, and INSERT … SELECT reads its source without locking
	// it. Statement-based binary logging cannot log READ COMMITTED writes,
	// so a server with binlog_format=STATEMENT keeps REPEATABLE READ (the
	// locks taken are then wider; correctness is the same).
	if binlogFormat != "STATEMENT" {
		name := "transaction_isolation" // MySQL 8 removed tx_isolation
		if srv.mariaDB && srv.num < 11_01_00 {
			name = "tx_isolation" // MariaDB names it so before 11.1
		}
		mc.Params[name] = "'READ-COMMITTED'"
	}
	maxIdle := 5 * time.Minute // under every server's default wait_timeout (8 h) and most proxies'
	if d := cfg.IdleTxTimeout; d > 0 {
		secs := strconv.Itoa(int(max((d+time.Second-1)/time.Second, 1)))
		if srv.mariaDB {
			mc.Params["idle_transaction_timeout"] = secs
		} else {
			mc.Params["wait_timeout"] = secs
			maxIdle = min(maxIdle, d/2)
		}
	}
	db, err := openPool(mc, cmp.Or(cfg.MaxConns, MaxConnsDefault), maxIdle)
	if err != nil {
		return nil, server{}, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, server{}, startupError(err, cfg, mc)
	}
	srv.conf = mc
	return db, srv, nil
}

func openPool(mc *gomysql.Config, size int, maxIdle time.Duration) (*sql.DB, error) {
	conn, err := gomysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size)
	db.SetConnMaxIdleTime(maxIdle)
	db.SetConnMaxLifetime(time.Hour)
	return db, nil
}

// inspect checks that the server is reachable, accepts the login and is
// recent enough, and returns its binlog format.
func inspect(ctx context.Context, db *sql.DB, cfg Config, mc *gomysql.Config) (server, string, error) {
	var version, binlog string
	err := db.QueryRowContext(ctx, `SELECT VERSION(), @@binlog_format`).Scan(&version, &binlog)
	if err != nil {
		return server{}, "", startupError(err, cfg, mc)
	}
	srv := parseVersion(version)
	if err := srv.supported(mc.Addr); err != nil {
		return srv, "", err
	}
	if srv.galera, srv.syncWait, err = galeraSettings(ctx, db); err != nil {
		return srv, "", startupError(err, cfg, mc)
	}
	return srv, strings.ToUpper(binlog), nil
}

// supported refuses MySQL before 8.0 and MariaDB before 10.6 in one line.
func (v server) supported(addr string) error {
	if v.mariaDB && v.num < minMariaDB || !v.mariaDB && v.num < minMySQL {
		return fmt.Errorf("mysql: %s at %s is too old: hourglass needs MySQL 8.0+ or MariaDB 10.6+; upgrade the server", v, addr)
	}
	return nil
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)`)

// parseVersion reads "8.0.36", "10.11.6-MariaDB-0+deb12u1" or, behind a
// replication-compatible prefix, "5.5.5-10.11.6-MariaDB".
func parseVersion(v string) server {
	s := server{version: v, mariaDB: strings.Contains(strings.ToLower(v), "mariadb")}
	v = strings.TrimPrefix(v, "5.5.5-")
	if m := versionRE.FindStringSubmatch(v); m != nil {
		a, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[2])
		c, _ := strconv.Atoi(m[3])
		s.num = a*10000 + b*100 + c
	}
	return s
}

// startupError turns a connection or first-query error into one line that
// says what to fix. The password is never part of it.
func startupError(err error, cfg Config, mc *gomysql.Config) error {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045:
			return fmt.Errorf("mysql: %s refused the login of user %q (error 1045): check the user and password in the URL", mc.Addr, mc.User)
		case 1698:
			return fmt.Errorf("mysql: %s refused the login of user %q (error 1698): the account authenticates with a plugin such as unix_socket (root's on MariaDB and Debian's MySQL), which admits only the OS user of the same name on the server's socket, whatever the password; give hourglass a user of its own: CREATE USER 'hourglass'@'%%' IDENTIFIED BY '<password>'; GRANT ALL ON `%s`.* TO 'hourglass'@'%%', and put it in the URL", mc.Addr, mc.User, mc.DBName)
		case 1049:
			return fmt.Errorf("mysql: database %q does not exist on %s (error 1049): create it (CREATE DATABASE `%s` CHARACTER SET utf8mb4) or fix the URL's path", mc.DBName, mc.Addr, mc.DBName)
		case 1044:
			return fmt.Errorf("mysql: user %q may not use database %q on %s (error 1044): GRANT ALL ON `%s`.* TO '%s'@'%%'", mc.User, mc.DBName, mc.Addr, mc.DBName, mc.User)
		case 1142, 1227, 1143:
			return fmt.Errorf("mysql: user %q lacks a privilege on database %q (error %d: %s): GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX ON `%s`.* TO '%s'@'%%'", mc.User, mc.DBName, me.Number, me.Message, mc.DBName, mc.User)
		}
		return fmt.Errorf("mysql: %s (user %q, database %q): error %d: %s", mc.Addr, mc.User, mc.DBName, me.Number, me.Message)
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("mysql: cannot reach the server at %s (%v): check the host and port in the URL and that MySQL or MariaDB is running there", mc.Addr, rootCause(err))
	}
	if strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "TLS") || strings.Contains(err.Error(), "x509") {
		return fmt.Errorf("mysql: TLS to %s failed (%v): check the tls parameter of the URL (true, skip-verify, preferred, false)", mc.Addr, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("mysql: connecting to %s: %w", mc.Addr, err)
	}
	return fmt.Errorf("mysql: connecting to %s as %q: %v", mc.Addr, mc.User, err)
}

// rootCause is the innermost error, for short messages.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// driverLogger sends go-sql-driver's messages (lost connections, mostly) to
// the store's logger instead of the driver's global one.
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) { l.log.Warn("mysql: driver: " + fmt.Sprint(v...)) }

// isConnLost reports whether err means the connection (or the server) went
// away, so the outcome of a statement in flight, a COMMIT included, is
// unknown.
func isConnLost(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, gomysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 2006, 2013, 1053, 1077, 1927, 3169: // gone away, lost, shutdown, killed
			return true
		case 1047: // Galera: this node is not part of the primary component (or not synced yet)
			return true
		}
	}
	return false
}

// retryReason returns why err is worth running the transaction again (one
// of the Retry… reasons), or "" when it is not: it failed only because of
// others running at the same time and was rolled back (a deadlock, also
// Galera's certification failure at COMMIT; a lock wait timeout; a
// duplicate key that a racing transaction committed first, whose retry
// reads the winner). galera says the server is a Galera node.
func retryReason(err error, galera bool) string {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return ""
	}
	switch me.Number {
	case 1213:
		if galera {
			return RetryCertification
		}
		return RetryDeadlock
	case 1205:
		return RetryLockTimeout
	case 1062:
		return RetryDuplicateKey
	case 1020:
		return RetrySerialization
	}
	return ""
}

// classify says what an error means to the writer and to the retries of
// the other transactions (retryPolicy): a lost race is retried, a lost
// connection (or a closed pool) is unavailable.
func (s *Store) classify(err error) writer.Class {
	if reason := retryReason(err, s.server.galera); reason != "" {
		return writer.Class{Kind: writer.Retry, Reason: reason}
	}
	// database/sql's "database is closed" has no exported sentinel.
	if isConnLost(err) || strings.Contains(err.Error(), "sql: database is closed") {
		return writer.Class{Kind: writer.Unavailable}
	}
	return writer.Class{Kind: writer.OneWrite}
}

// retry runs fn, again after a lost race, as retryPolicy allows (each
// retry counted by Config.ObserveRetry); it returns fn's last error.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	return retryPolicy().Do(ctx, fn, s.classify, s.cfg.ObserveRetry)
}

// fail wraps err of operation op: connection loss (and a closed pool)
// becomes unavailable, with unavailable.Message for the client and the
// driver's error (which names the server's address) kept for the log line
// that reports it; *hourglass.Error passes through; anything else is an
// internal error naming the package and operation.
func fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var he *hourglass.Error
	if errors.As(err, &he) {
		return err
	}
	// database/sql's "database is closed" has no exported sentinel.
	if isConnLost(err) || strings.Contains(err.Error(), "sql: database is closed") {
		return unavailable.New("mysql: "+op, err)
	}
	return fmt.Errorf("mysql: %s: %w", op, err)
}

// nowArg is the value bound to the COALESCE(?, dbNowMs) of every statement
// that reads "now": NULL in production (the server's clock), the test
// clock's milliseconds otherwise.
func (s *Store) nowArg() any {
	if s.clock == nil {
		return nil
	}
	return hourglass.UnixMilli(s.clock.Now())
}

// dbNowMs is the database server's now in unix milliseconds. The session is
// in UTC, so UNIX_TIMESTAMP(NOW(3)) is exact; NOW(3) is the statement's
// start.
const dbNowMs = `CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)`

// nowExpr is "now" in every statement: the bound test clock, else the server's.
const nowExpr = `COALESCE(?, ` + dbNowMs + `)`

// querier is what *sql.DB, *sql.Tx and *sql.Conn share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// eachRow runs query on q, an "IN (…)" in it standing for the placeholders
// of args, and calls scan on each row. Its errors are the driver's.
func eachRow(ctx context.Context, q querier, query string, args []any, scan func(rows *sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, strings.Replace(query, "(…)", "("+placeholders(len(args))+")", 1), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// inTx runs fn in a transaction on the pool, again after a lost race
// (retryPolicy). fn must be safe to run again. Connection loss is
// unavailable; the commit's outcome is then unknown and the caller must
// not assume either.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return fail(op, s.retry(ctx, func() error { return s.tryTx(ctx, fn) }))
}

func (s *Store) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// backoff is the wait before retry n of a transaction that lost a race,
// so the winners can finish: about 1, 2, 4… ms, at most 50 ms, each drawn
// at random from half to one and a half times that. The randomness matters
// on Galera: two nodes whose batches conflicted on a hot row would
// otherwise retry in step and conflict again.
func backoff(n int) time.Duration {
	d := min(time.Duration(1<<min(n-1, 6))*time.Millisecond, 50*time.Millisecond)
	return d/2 + rand.N(d)
}

// placeholders returns "?, ?, …" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// WriteHealth returns nil while order writes commit, or, from a write that
// failed because the database was unreachable until one commits again, an
// unavailable *hourglass.Error saying so (api.WriteHealthReporter: /readyz
// answers 503 meanwhile). While it is not nil a small write is tried every
// second, so it clears by itself when the database is back.
func (s *Store) WriteHealth() error { return s.w.Health() }

// probeWrite is the health tracker's small write.
func (s *Store) probeWrite(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('write_probe', ?)
ON DUPLICATE KEY UPDATE value = VALUES(value)`, cmp.Or[hourglass.Clock](s.clock, hourglass.SystemClock{}).Now().UTC().Format(time.RFC3339Nano))
	return fail("write probe", err)
}
