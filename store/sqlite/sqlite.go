// Package sqlite is the embedded Store: one SQLite database file in WAL mode,
// written by a single goroutine that group-commits concurrent writes (many
// API calls share one transaction and one fsync) and read through a small
// pool of connections. It owns its schema and migrations.
package sqlite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/writer"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// Defaults of Config.
const (
	FileNameDefault     = "hourglass.db"
	ReadPoolSizeDefault = 4
	MaxBatchDefault     = 512
)

// Config configures Open. The zero value of each field means its default.
type Config struct {
	// Dir is the directory holding the database file; it is created if
	// missing. Required.
	Dir string
	// FileName of the database inside Dir (default FileNameDefault).
	FileName string
	// ReadPoolSize is the number of read connections (default 4).
	ReadPoolSize int
	// fanOutCheck is how often the fan-out loop looks at fanout_pending
	// without a wake-up (zero: fanout.CheckDefault); the package's tests
	// lengthen it.
	fanOutCheck time.Duration
	// beforeFanOut, if set, is called by the fan-out loop before each look;
	// the package's tests hold it to see what was deferred.
	beforeFanOut func()
	// beforeTx, if set, is called before each transaction of the writer
	// with the number of writes it runs; the package's tests count a failed
	// batch's transactions with it.
	beforeTx func(writes int)
	// MaxBatch is the most writes group-committed in one transaction.
	MaxBatch int
	// Clock gives "now" to writes (default the system clock).
	Clock hourglass.Clock
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Outbox makes every created order also write its timer to the outbox
	// table, in the same transaction, for a delay mechanism outside the
	// database (see hourglass.Outbox).
	Outbox bool
	// Observe, if set, is called after every group commit with the number of
	// writes it held and how long the commit (including fsync) took.
	Observe func(writes int, commit time.Duration)
	// ObserveFanoutPending, if set, is told the number of rows of
	// fanout_pending (close batches whose webhook deliveries are deferred)
	// at each look of the fan-out loop (about every second, and after a
	// burst). It is called from one goroutine.
	ObserveFanoutPending func(n int)
}

// Validate reports a configuration error, naming the field.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("sqlite: Dir is required")
	}
	if c.ReadPoolSize < 0 || c.ReadPoolSize > 64 {
		return fmt.Errorf("sqlite: ReadPoolSize must be 0..64, got %d", c.ReadPoolSize)
	}
	if c.MaxBatch < 0 || c.MaxBatch > 100000 {
		return fmt.Errorf("sqlite: MaxBatch must be 0..100000, got %d", c.MaxBatch)
	}
	return nil
}

// Store is the SQLite implementation of hourglass.Store. It is safe for
// concurrent use.
type Store struct {
	// Store is the SQL written once for the paths that are not the group
	// commit (store/internal/sqlq): stats, outbox, event-log cursors, ….
	*sqlq.Store
	// Writes are the group-committed writes (store/internal/batch): orders,
	// timers, delivery attempts.
	batch.Writes

	cfg    Config
	clock  hourglass.Clock
	log    *slog.Logger
	writer *sqlite.Conn
	reads  *sqlitex.Pool
	// w is the group-commit writer (store/internal/writer): one goroutine
	// on the write connection.
	w      *writer.Writer[*op]
	policy stored.PolicyCache
	// orderRows and eventRows are the multi-row INSERTs of a batch's orders
	// and events (batch.go), built once.
	orderRows, eventRows rowsInsert
	// webhooks counts webhooks (events.go).
	webhooks webhookCounter

	lock      *os.File // held while open: see lockFile
	closeOnce sync.Once
	closeErr  error

	// deliveriesPerOrder is the webhook deliveries per order the latest
	// close created, rounded up: see fannedOut.
	deliveriesPerOrder atomic.Int64
	// fanOut creates the deliveries closes left in fanout_pending
	// (fanout.go); stopFanOut ends it, and fanOutDone is closed then.
	fanOut     *fanout.Loop
	stopFanOut context.CancelFunc
	fanOutDone chan struct{}
}

// The store implements the whole contract: it fails to compile when it
// implements less.
var _ hourglass.Database = (*Store)(nil)

// op is one write waiting for the writer: an order, timer or attempt
// write (b, run by store/internal/batch, batch.go), or any other (run). run
// must either succeed, or fail with a *hourglass.Error before writing
// anything (a domain refusal), or fail with any other error (then the whole
// batch is rolled back and bisected, so one broken write cannot fail its
// peers). run may therefore run more than once: it must not keep outputs of
// a rolled-back run.
type op struct {
	b   *batch.Op
	run func(conn *sqlite.Conn, now time.Time) error
	err error
	// orders is an urgent op's weight against urgentPerCommit: the orders it
	// closes (or timers it fires), each with the webhook deliveries the
	// latest close created per order (Store.deliveriesPerOrder).
	orders int
	// due, if set, says what the committed op changed in what is due
	// (writeDue).
	due func(u *hourglass.DueUpdate)
}

func (o *op) Fail(err error) {
	if o.b != nil {
		o.b.Fail(err)
	}
	o.err = err
}

func (o *op) Err() error {
	if o.b != nil {
		return o.b.Err()
	}
	return o.err
}

// Due implements writer.Announcer: what the committed write changed in
// what is due, told by the write itself (writeDue).
func (o *op) Due(u *hourglass.DueUpdate) {
	if o.b != nil {
		o.b.Due(u)
	} else if o.due != nil {
		o.due(u)
	}
}

// Open opens (creating if needed) the database in cfg.Dir, applies
// migrations and starts the writer. Close must be called to stop it.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.FileName = cmp.Or(cfg.FileName, FileNameDefault)
	cfg.ReadPoolSize = cmp.Or(cfg.ReadPoolSize, ReadPoolSizeDefault)
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, MaxBatchDefault)
	s := &Store{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, orderRows: orderRows(), eventRows: eventRows()}
	s.Store = sqlq.New(sqlDialect, sqlDB{s})
	s.Writes = batch.Writes{Queue: s.submit, ReadOrder: s.Order}
	if s.clock == nil {
		s.clock = hourglass.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	path := dbPath(cfg.Dir, cfg.FileName)
	pinAllocatorPages()
	if err := prepareFiles(cfg.Dir, path, s.log); err != nil {
		return nil, err
	}
	lock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	opened := false
	defer func() {
		if !opened {
			s.unlock()
		}
	}()
	// The writer writes its WAL through gatherVFS (walgather.go), which
	// needs the synchronous = FULL set below.
	if err := registerGatherVFS(); err != nil {
		return nil, err
	}
	uri, err := vfsURI(path, gatherVFS)
	if err != nil {
		return nil, err
	}
	w, err := sqlite.OpenConn(uri, sqlite.OpenReadWrite|sqlite.OpenCreate|sqlite.OpenURI)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.writer = w
	// synchronous=FULL: a commit returns only after the WAL is fsynced, so an
	// answered write survives a power cut, not just a process crash.
	// wal_autocheckpoint: the commit that takes the WAL past it copies the
	// latest version of each page in the WAL into the database file and
	// fsyncs that, on the one writer, while closes wait. At 1,000 pages (the
	// default) a node at 5,000 orders/s checkpointed 7 times a second and
	// wrote 30 database pages per commit; at 10,000 pages (a WAL of up to
	// 40 MiB) 10 times less often, and 8 pages per commit, since a hot page
	// written by many commits is copied once (docs/benchmarks/sqlite-rate.md).
	for _, pragma := range []string{
		"PRAGMA journal_mode = WAL",
		"PRAGMA synchronous = FULL",
		"PRAGMA busy_timeout = 5000",
		"PRAGMA wal_autocheckpoint = 10000",
	} {
		if err := sqlitex.ExecuteTransient(w, pragma, nil); err != nil {
			w.Close()
			return nil, fmt.Errorf("sqlite: configure %s: %s: %w", path, pragma, err)
		}
	}
	if err := migrateConn(context.Background(), w); err != nil {
		w.Close()
		return nil, err
	}
	// One small write now, before any caller's: a WAL that a clean close
	// deleted is created by the first commit after open, which then syncs
	// the new file and the directory too. A restart's first batch is its
	// backlog of closes, so that cost is paid here instead. A failure is
	// not fatal: the writer's probe reports write health (/readyz).
	if err := writeProbe(w, s.clock.Now()); err != nil {
		s.log.Warn("sqlite: first write after open failed", "path", path, "err", err)
	}
	pool, err := sqlitex.NewPool(path, sqlitex.PoolOptions{
		Flags:    sqlite.OpenReadWrite | sqlite.OpenURI,
		PoolSize: cfg.ReadPoolSize,
		PrepareConn: func(c *sqlite.Conn) error {
			// A reader's cache is emptied by each read that follows a
			// commit (see pinAllocatorPages), so a large one buys little
			// while the writer is busy and holds allocator pages: 256 KiB.
			for _, pragma := range []string{"PRAGMA query_only = 1", "PRAGMA busy_timeout = 5000", "PRAGMA cache_size = -256"} {
				if err := sqlitex.ExecuteTransient(c, pragma, nil); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open read pool: %w", err)
	}
	s.reads = pool
	s.w = writer.New(writer.Config[*op]{
		Name: "sqlite", Log: s.log, Writers: 1, MaxBatch: cfg.MaxBatch,
		Weight: func(o *op) int { return o.orders }, UrgentBudget: urgentPerCommit,
		Retry: retryPolicy(), Clock: s.clock, Probe: s.probeWrite, ProbeInterval: ProbeInterval,
		Observe: cfg.Observe, BeforeTx: cfg.beforeTx, LowGather: lowGather,
	}, dialect{s})
	s.fanOutDone = make(chan struct{})
	s.fanOut = s.newFanOut()
	fanOutCtx, stopFanOut := context.WithCancel(context.Background())
	s.stopFanOut = stopFanOut
	go func() {
		defer close(s.fanOutDone)
		s.fanOut.Run(fanOutCtx) // looks at once: a crash may have left some
	}()
	opened = true
	return s, nil
}

// prepareFiles creates the data directory (0700) and the database file
// (0600) if missing, since the database holds webhook secrets; it refuses a
// directory others can write (they could replace the database), and takes
// group and other permissions off the database files hourglass owns.
func prepareFiles(dir, path string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sqlite: create data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("sqlite: data dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("sqlite: data dir %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o002 != 0 {
		return fmt.Errorf("sqlite: data dir %s is writable by others (mode %04o): run chmod 700 %s, or choose another --data-dir", dir, perm, dir)
	} else if perm&0o077 != 0 {
		log.Warn("sqlite: the data dir is readable by group or others; the database holds webhook secrets: chmod 700 it", "dir", dir, "mode", fmt.Sprintf("%04o", perm))
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, 0o600); err != nil {
				return fmt.Errorf("sqlite: chmod 600 %s: %w", p, err)
			}
		}
	}
	return nil
}

// vfsURI is the URI that opens the database file at path with the VFS
// named vfs.
func vfsURI(path, vfs string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("sqlite: %s: %w", path, err)
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: url.Values{"vfs": {vfs}}.Encode()}
	return u.String(), nil
}

// dbPath is the database file's path.
func dbPath(dir, fileName string) string {
	return filepath.Join(dir, cmp.Or(fileName, FileNameDefault))
}

// Close stops the writer after the queued writes and closes the database.
// It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stopFanOut()
		<-s.fanOutDone
		s.w.Close()
		s.closeErr = errors.Join(s.reads.Close(), s.writer.Close())
		s.unlock()
	})
	return s.closeErr
}

// unlock releases the file lock (closing the file drops the flock).
func (s *Store) unlock() {
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// write queues run for the writer and waits until its transaction has
// committed (or failed). Once queued, a write runs even if ctx ends while it
// waits, unless it has not started yet when ctx ends: then it is skipped
// and ctx.Err() returned.
func (s *Store) write(ctx context.Context, run func(conn *sqlite.Conn, now time.Time) error) error {
	return s.w.Submit(ctx, writer.Normal, &op{run: run})
}

// writeDue is write for an op that changes what is due (a create, a pay,
// a cancel, a timer's arm or cancel): once it committed, the writer asks
// due what it changed and announces it to the due feed (WatchDue).
func (s *Store) writeDue(ctx context.Context, due func(u *hourglass.DueUpdate), run func(conn *sqlite.Conn, now time.Time) error) error {
	return s.w.Submit(ctx, writer.Normal, &op{run: run, due: due})
}

// urgentWeight is an urgent op's weight for n orders (see op.orders).
func (s *Store) urgentWeight(n int) int { return n * int(1+s.deliveriesPerOrder.Load()) }

// fannedOut records how many webhook deliveries a close created for n
// orders, which weighs the next urgent ops (closes and timer fires): with 5 webhooks a close
// writes 7 rows, not 2, and a transaction of 1,024 of them held the API
// writes behind it for about 100 ms on 2 cores.
func (s *Store) fannedOut(deliveries, n int) {
	if n > 0 {
		s.deliveriesPerOrder.Store(int64((deliveries + n - 1) / n))
	}
}

// writeLow is write for bookkeeping no request waits on (recording webhook
// delivery attempts): it goes into a transaction only with room left by the
// closes and API writes, so a delivery backlog cannot slow the API.
func (s *Store) writeLow(ctx context.Context, run func(conn *sqlite.Conn, now time.Time) error) error {
	return s.w.Submit(ctx, writer.Low, &op{run: run})
}

// urgentPerCommit is about the most orders the urgent ops (close batches)
// of one transaction close, each counted once more per webhook delivery it
// fans out to (see fannedOut): the writer takes urgent ops until they reach
// it (at least one). In a burst, a commit's fsync is then shared by
// thousands of closes, the close path keeps the next batches queued so the
// writer never waits for them (they are pipelined), and a transaction stays
// short enough (tens of ms) that the API writes sharing it or waiting for
// it are not held up by a whole burst's worth of closes.
const urgentPerCommit = 1024

// lowGather is how long a batch of bookkeeping writes (webhook attempt
// records, the fan-out) waits for more after a batch of several
// (writer.Config.LowGather). In a burst's deliveries every attempt records
// itself: without the wait the writer committed about 4 records per
// transaction, each commit a WAL append and an fsync, and was busy 80% of
// the time; with 2 ms, about 17 and 50% (docs/benchmarks/webhooks.md). No
// request waits on these writes, and any other write ends the wait.
const lowGather = 2 * time.Millisecond

// retryPolicy is SQLite's: one attempt, unbounded in time (a local file
// does not stop answering). The store's one writer goroutine never races
// another writer of the file (the file lock keeps other processes out), so
// nothing rolls a batch back that running it again would cure.
func retryPolicy() writer.RetryPolicy { return writer.RetryPolicy{Attempts: 1} }

// storageError returns, for an error whose cause is the storage under the
// database (SQLITE_FULL, SQLITE_IOERR*, SQLITE_READONLY*), an unavailable
// *hourglass.Error whose message names the cause; nil for any other error.
// A retry is safe (nothing was written) and succeeds once the cause is gone.
func storageError(err error) *hourglass.Error {
	var cause string
	switch sqlite.ErrCode(err).ToPrimary() {
	case sqlite.ResultFull:
		cause = "the disk is full"
	case sqlite.ResultIOErr:
		cause = "an I/O error on the disk"
	case sqlite.ResultReadOnly:
		cause = "the database is read-only"
	default:
		return nil
	}
	return &hourglass.Error{Code: hourglass.CodeUnavailable, Message: fmt.Sprintf("database write failed: %s (%s); nothing was written, retry later", cause, sqlite.ErrCode(err))}
}

// WriteHealth returns nil while writes commit, or, since a write failed for
// a storage cause and until one commits again, an unavailable
// *hourglass.Error naming the cause. While it is not nil the store probes
// with a small write every ProbeInterval, so it recovers without traffic.
// It is safe for concurrent use.
func (s *Store) WriteHealth() error { return s.w.Health() }

// ProbeInterval is how often a store whose writes fail tries a small write.
const ProbeInterval = time.Second

// probeWrite is the write health's probe.
func (s *Store) probeWrite(ctx context.Context) error {
	return s.write(ctx, writeProbe)
}

// writeProbe records now in settings: the smallest write that commits.
func writeProbe(conn *sqlite.Conn, now time.Time) error {
	return sqlitex.Execute(conn, `INSERT INTO settings (name, value) VALUES ('write_probe', ?1)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, &sqlitex.ExecOptions{Args: []any{now.UTC().Format(time.RFC3339Nano)}})
}

// dialect is the store as the writer sees it.
type dialect struct{ *Store }

// Run runs a batch in one immediate transaction on the write connection, in
// queue order: each run of consecutive order, timer and attempt writes as
// one batch.Run, each other write alone. A write's *hourglass.Error is its
// refusal; any other error rolls the batch back, and a storage cause
// becomes storageError's. It returns the deliveries the batch created.
func (d dialect) Run(ctx context.Context, ops []*op) (int, error) {
	out, err := d.runTx(ctx, ops)
	if he := storageError(err); he != nil {
		return 0, he
	}
	if err != nil {
		return 0, err
	}
	if out.Deferred {
		d.fanOut.Wake()
	}
	return out.Deliveries, nil
}

func (d dialect) runTx(ctx context.Context, ops []*op) (out batch.Outcome, err error) {
	end, err := sqlitex.ImmediateTransaction(d.writer)
	if err != nil {
		return out, fmt.Errorf("sqlite: begin: %w", err)
	}
	defer end(&err)
	for i := 0; i < len(ops); {
		if ops[i].b == nil {
			err := ops[i].run(d.writer, d.clock.Now())
			var he *hourglass.Error
			if err != nil && !errors.As(err, &he) {
				return out, err
			}
			ops[i].err = err
			i++
			continue
		}
		var run []*batch.Op
		for ; i < len(ops) && ops[i].b != nil; i++ {
			run = append(run, ops[i].b)
		}
		o, err := d.runBatch(ctx, d.writer, run)
		if err != nil {
			return out, err
		}
		out.Deliveries += o.Deliveries
		out.Deferred = out.Deferred || o.Deferred
	}
	return out, nil
}

// Classify implements writer.Dialect: a storage cause is unavailable (not
// one write's, so not bisected); anything else may be one write's.
func (dialect) Classify(err error) writer.Class {
	var he *hourglass.Error
	if errors.As(err, &he) && he.Code == hourglass.CodeUnavailable || storageError(err) != nil {
		return writer.Class{Kind: writer.Unavailable}
	}
	return writer.Class{Kind: writer.OneWrite}
}

// read runs fn on a pooled read connection.
func (s *Store) read(ctx context.Context, fn func(conn *sqlite.Conn) error) error {
	conn, err := s.reads.Take(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: take read connection: %w", err)
	}
	defer s.reads.Put(conn)
	return fn(conn)
}

// step runs a prepared statement that returns at most one row, calling fn on it.
func step(stmt *sqlite.Stmt, fn func(stmt *sqlite.Stmt)) (found bool, err error) {
	defer stmt.Reset()
	row, err := stmt.Step()
	if err != nil {
		return false, err
	}
	if row && fn != nil {
		fn(stmt)
	}
	return row, nil
}

var _ hourglass.DueFeed = (*Store)(nil)

// WatchDue implements hourglass.DueFeed: the due items this store's writes
// commit (a SQLite database has one process).
func (s *Store) WatchDue(ctx context.Context, fn func(hourglass.DueUpdate)) (wait func()) {
	return s.w.WatchDue(ctx, nil, fn)
}
