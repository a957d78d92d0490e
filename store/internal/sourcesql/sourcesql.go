// Package sourcesql reads and closes the rows of a shop's own table (a
// hourglass.Source) on a SQL database: the queries, the close's
// transaction with a savepoint per row, the start-up checks and the index
// warnings, written once above a thin Dialect that store/postgres and
// store/mysql implement (placeholders, quoting, the catalogue, EXPLAIN,
// the event rows and the error classes).
package sourcesql

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// Rows is a result set (sqlq's: pgx's and database/sql's, adapted).
type Rows = sqlq.Rows

// Querier runs statements on a pool or in a transaction.
type Querier = sqlq.Querier

// Stmt is a statement with its arguments.
type Stmt struct {
	SQL  string
	Args []any
}

// Pipeliner is implemented by a transaction that can send several
// statements in one round trip (PostgreSQL's pipeline).
type Pipeliner interface {
	// ExecAll runs stmts in order and returns the rows each changed, up to
	// the first that failed: its index and error (-1, nil: none failed).
	ExecAll(ctx context.Context, stmts []Stmt) (counts []int64, failedAt int, err error)
}

// ErrUnpipelined is returned (wrapped) by a Pipeliner that cannot tell
// which statement failed: the close runs again without pipelining.
var ErrUnpipelined = errors.New("a pipelined statement failed")

// execAll runs stmts on tx, pipelined when tx can and pipe is set.
func execAll(ctx context.Context, tx Querier, stmts []Stmt, pipe bool) ([]int64, int, error) {
	if p, ok := tx.(Pipeliner); ok && pipe {
		return p.ExecAll(ctx, stmts)
	}
	counts := make([]int64, 0, len(stmts))
	for i, st := range stmts {
		n, err := tx.Exec(ctx, st.SQL, st.Args...)
		if err != nil {
			return counts, i, err
		}
		counts = append(counts, n)
	}
	return counts, -1, nil
}

// Event is a source row's event (source.closed, source.expiring) to
// write with its deliveries.
type Event struct {
	Type    hourglass.EventType
	ID      string
	OrderID int64 // hourglass.SourceEventOrderID
	At      int64 // unix ms
	Body    []byte
	// By is the close's provenance (hourglass.CloserFrom the close's
	// context): the events' cause and node columns, NULL when unknown.
	By hourglass.Closer
}

// Dialect is what differs between databases.
type Dialect interface {
	// Param is the n-th placeholder (from 1): "$1" or "?".
	Param(n int) string
	// Quote quotes an identifier.
	Quote(ident string) string
	// DB runs statements on the pool.
	DB() Querier
	// InTx runs fn in a transaction, committing when it returns nil; its
	// statements wait for a row lock as wait says (WaitRow or WaitBatch).
	InTx(ctx context.Context, wait Wait, fn func(tx Querier) error) error
	// Columns returns the data types (lower case) of the columns of
	// schema.table by name ("" schema: the connection's own).
	Columns(ctx context.Context, schema, table string) (map[string]string, error)
	// Prepare prepares q (checking its syntax, tables and columns).
	Prepare(ctx context.Context, q string) error
	// Scans returns the tables a plan of q (no parameters) would read in
	// full, though an index could serve it.
	Scans(ctx context.Context, q string) ([]string, error)
	// NowMs reads the database's now, unix ms, in tx.
	NowMs(ctx context.Context, tx Querier) (int64, error)
	// WriteEvents writes evs with their webhook deliveries (to webhooks
	// subscribed to each event's type or "*") in tx; it returns the
	// deliveries written.
	WriteEvents(ctx context.Context, tx Querier, evs []Event) (int, error)
	// Committed is told the deliveries a committed close wrote (it wakes
	// webhook delivery).
	Committed(deliveries int)
	// Aborts reports an error after which the transaction cannot go on
	// (a deadlock, a lost connection): the whole close is retried.
	Aborts(err error) bool
	// CurrentSchema returns the schema (PostgreSQL) or database (MySQL)
	// an unqualified table name resolves in.
	CurrentSchema(ctx context.Context) (string, error)
	// UniqueIndex reports whether schema.table has a primary key or a
	// unique index (not partial, not on an expression) on column alone.
	UniqueIndex(ctx context.Context, schema, table, column string) (bool, error)
	// TimeBounds are hourglass.SourceDeadlineMinMs and
	// hourglass.SourceDeadlineMaxMs as SQL literals a TIMESTAMP/DATETIME
	// column compares with, in UTC.
	TimeBounds() (lo, hi string)
	// Text is the SQL of expr read as text.
	Text(expr string) string
	// Blocked reports a statement that gave up waiting for a row lock
	// (the dialect's lock wait bound) or lost a deadlock: another
	// transaction, the shop's, holds a row it needs. Its row is left out
	// of the close and retried alone (hourglass.SourceBlocked).
	Blocked(err error) bool
	// LockWaitSQL is the statement that makes the rest of a transaction's
	// statements wait for a row lock as wait says, or "" where a wait
	// cannot change within a transaction (MySQL: every statement of a
	// source waits its sessions' bound).
	LockWaitSQL(wait Wait) string
	// LockKeys is a query that reads the column key of the rows of table
	// whose key is one of params 1 to n, locking them as an UPDATE of them
	// would and skipping (not waiting for) those another transaction holds;
	// it locks no other row (InnoDB locks every row a locking read scans).
	LockKeys(table, key string, n int) string
	// InsertNew is an INSERT of rows rows of cols (params 1 to
	// rows*len(cols), row by row) into table that changes nothing, and
	// counts no row changed, for a row whose primary key exists
	// (committed, or committed by the transaction it waited for).
	InsertNew(table string, cols []string, rows int) string
	// DeleteSome is a DELETE of at most limit rows of table matching
	// where (whose params it keeps), in no particular order.
	DeleteSome(table, where string, limit int) string
}

// Wait is how long a close's statement waits for a row lock another
// transaction (the shop's) holds before it gives way; each dialect sets
// its bound for each.
type Wait int

const (
	// WaitRow: a close of one row.
	WaitRow Wait = iota
	// WaitBatch: a close of several rows gives way sooner: while one
	// statement waits, the batch holds the rows it locked before, which the
	// shop's transactions may queue for; the row it waited for is left out
	// and closed alone after.
	WaitBatch
	// WaitOrdered: the source's lock statements, which take their locks in
	// one order (the shop's own), so that their waits are a queue, not a
	// cycle.
	WaitOrdered
)

// Table is one source on a database; it implements hourglass.SourceTable.
type Table struct {
	src hourglass.Source
	d   Dialect
	ms  bool // the deadline is unix ms

	key, deadline, table string // quoted
	stmts                []hourglass.BoundSQL
	lock                 []string // the source's lock statements, :keys unbound
	// qual is the table as messages name it: schema.table, the schema
	// the database resolved an unqualified name in.
	qual string
	// inRange is the SQL condition of a row whose key and deadline lie in
	// hourglass's range; every read of pending rows keeps it, so a bad
	// row never stops a page (badrows.go).
	inRange string
	met     metRows
}

var _ hourglass.SourceTable = (*Table)(nil)

// closeAttempts bounds the retries of a close that a deadlock or a lost
// certification aborted.
const closeAttempts = 5

// Open checks src against the database: its table and columns exist with
// usable types, every query and statement prepares; it returns the table
// and a warning for each query a missing index would make scan. Errors are
// one line naming the source.
func Open(ctx context.Context, d Dialect, src hourglass.Source) (*Table, []string, error) {
	if err := src.Validate(); err != nil {
		return nil, nil, err
	}
	fail := func(format string, args ...any) error {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "source %s: %s", src.Name, fmt.Sprintf(format, args...))
	}
	schema, name := src.SchemaTable()
	if schema == "" {
		// Every message names the schema (database) the name resolved in:
		// on MySQL, hourglass's own database, not the shop's.
		var err error
		if schema, err = d.CurrentSchema(ctx); err != nil {
			return nil, nil, fmt.Errorf("source %s: read the current schema: %w", src.Name, err)
		}
	}
	qual := schema + "." + name
	cols, err := d.Columns(ctx, schema, name)
	if err != nil {
		return nil, nil, fmt.Errorf("source %s: read the columns of %s: %w", src.Name, qual, err)
	}
	if len(cols) == 0 {
		return nil, nil, fail("table: %s does not exist (or hourglass's role cannot see it; grant it SELECT)", qual)
	}
	isInt := func(t string) bool { return strings.Contains(t, "int") }
	keyType, ok := cols[src.Key]
	if !ok {
		return nil, nil, fail("key: %s has no column %s", qual, src.Key)
	}
	if !isInt(keyType) {
		return nil, nil, fail("key: %s.%s is %s; want an integer column (BIGINT)", qual, src.Key, keyType)
	}
	dlType, ok := cols[src.Deadline]
	if !ok {
		return nil, nil, fail("deadline: %s has no column %s", qual, src.Deadline)
	}
	t := &Table{src: src, d: d, ms: src.DeadlineUnit == "ms", key: d.Quote(src.Key), deadline: d.Quote(src.Deadline), qual: qual}
	switch {
	case t.ms && !isInt(dlType):
		return nil, nil, fail("deadline: %s.%s is %s, but deadline_unit: ms wants a BIGINT of unix milliseconds", qual, src.Deadline, dlType)
	case !t.ms && isInt(dlType):
		return nil, nil, fail("deadline: %s.%s is %s; add deadline_unit: ms if it holds unix milliseconds", qual, src.Deadline, dlType)
	case !t.ms && !strings.HasPrefix(dlType, "timestamp") && dlType != "datetime":
		return nil, nil, fail("deadline: %s.%s is %s; want TIMESTAMP/DATETIME (UTC) or a BIGINT with deadline_unit: ms", qual, src.Deadline, dlType)
	}
	unique, err := d.UniqueIndex(ctx, schema, name, src.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("source %s: read the indexes of %s: %w", src.Name, qual, err)
	}
	if !unique {
		return nil, nil, fail("key: %s.%s has no unique index, so two rows could share a key and one close would match both: make it the primary key or CREATE UNIQUE INDEX %s_%s ON %s (%s)",
			qual, src.Key, name, src.Key, qual, src.Key)
	}
	t.table = d.Quote(schema) + "." + d.Quote(name)
	t.inRange = t.rangeSQL(true)
	for _, q := range src.Close {
		t.stmts = append(t.stmts, hourglass.BindKey(q, d.Param))
	}
	// Every query hourglass runs prepares, the shop's condition and
	// statements with them.
	checks := []struct{ what, sql string }{
		{"pending", t.dueSQL(false, 1, nil, d.Param)},
		{"pending", t.tailSQL(1, d.Param)},
	}
	for i, st := range t.stmts {
		checks = append(checks, struct{ what, sql string }{fmt.Sprintf("close[%d]", i), st.SQL})
	}
	t.lock = src.Lock
	for i, q := range t.lock {
		q, _ = hourglass.BindKeys(q, 1, d.Param)
		checks = append(checks, struct{ what, sql string }{fmt.Sprintf("lock[%d]", i), q})
	}
	for _, c := range checks {
		if err := d.Prepare(ctx, c.sql); err != nil {
			return nil, nil, fail("%s: does not prepare: %v", c.what, oneLine(err))
		}
	}
	if err := t.checkUnit(ctx); err != nil {
		return nil, nil, err
	}
	warnings, err := t.indexWarnings(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("source %s: explain its queries: %w", src.Name, err)
	}
	return t, warnings, nil
}

// indexWarnings explains the queries with literal values and names an
// index for each that would scan a table.
func (t *Table) indexWarnings(ctx context.Context) ([]string, error) {
	lit := func(int) string { return "0" }
	until := "'2000-01-01 00:00:00'"
	if t.ms {
		until = "0"
	}
	_, name := t.src.SchemaTable()
	qual := t.qual
	queries := []struct{ what, sql, fix string }{
		// Without the key's range, which the key's index would serve
		// though the deadline's must.
		{"the window query (pending rows by deadline)", t.dueSQLIn(t.deadlineInSQL(), false, 1, nil, func(int) string { return until }),
			fmt.Sprintf("CREATE INDEX %s_%s ON %s (%s)", name, t.src.Deadline, qual, t.src.Deadline)},
		{"the tail query (new rows by key)", t.tailSQL(1, lit),
			fmt.Sprintf("make %s its primary key or CREATE UNIQUE INDEX %s_%s ON %s (%s)", t.src.Key, name, t.src.Key, qual, t.src.Key)},
	}
	for i, q := range t.src.Close {
		queries = append(queries, struct{ what, sql, fix string }{fmt.Sprintf("close[%d]", i), hourglass.BindKey(q, lit).SQL,
			"index the columns its WHERE and JOIN use"})
	}
	var warnings []string
	for _, q := range queries {
		scans, err := t.d.Scans(ctx, q.sql)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.what, err)
		}
		if len(scans) > 0 {
			warnings = append(warnings, fmt.Sprintf("source %s: %s would read all of %s: %s", t.src.Name, q.what, strings.Join(scans, ", "), q.fix))
		}
	}
	return warnings, nil
}

// dueSQL pages pending rows by (deadline, key): until is param 1, the
// cursor (with cursor) params 2 to 4 (after twice, then its key); limit
// and parts are literals.
func (t *Table) dueSQL(cursor bool, limit int, parts hourglass.Parts, param func(int) string) string {
	return t.dueSQLIn(t.inRange, cursor, limit, parts, param)
}

// dueSQLIn is dueSQL keeping the rows of inRange.
func (t *Table) dueSQLIn(inRange string, cursor bool, limit int, parts hourglass.Parts, param func(int) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT %s, %s FROM %s WHERE (%s) AND %s <= %s AND %s", t.key, t.deadline, t.table, t.src.Pending, t.deadline, param(1), inRange)
	if cursor {
		fmt.Fprintf(&b, " AND (%s > %s OR (%s = %s AND %s > %s))", t.deadline, param(2), t.deadline, param(3), t.key, param(4))
	}
	b.WriteString(t.partsSQL(parts))
	fmt.Fprintf(&b, " ORDER BY %s, %s LIMIT %d", t.deadline, t.key, limit)
	return b.String()
}

// partsSQL keeps the rows of parts (nil: all) by hourglass.PartitionOf.
func (t *Table) partsSQL(parts hourglass.Parts) string {
	if parts == nil {
		return ""
	}
	ps := make([]string, len(parts))
	for i, p := range parts {
		ps[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf(" AND ((%s %% %d) + %d) %% %d IN (%s)", t.key, hourglass.Partitions, hourglass.Partitions, hourglass.Partitions, strings.Join(ps, ", "))
}

func (t *Table) tailSQL(limit int, param func(int) string) string {
	return fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s > %s AND (%s) AND %s ORDER BY %s LIMIT %d",
		t.key, t.deadline, t.table, t.key, param(1), t.src.Pending, t.inRange, t.key, limit)
}

// arg is a deadline as a parameter.
func (t *Table) arg(at time.Time) any {
	if t.ms {
		return hourglass.UnixMilli(at)
	}
	return at.UTC()
}

// scan reads (key, deadline) rows; a row whose deadline cannot be read or
// lies out of range is left out and kept for BadRows.
func (t *Table) scan(rows Rows, err error) ([]hourglass.DueItem, error) {
	p, err := t.readPage(rows, err)
	return p.rows, err
}

// page is one read: the rows hourglass can time, and the last row the
// database returned, good or bad (the cursor of the next page).
type page struct {
	rows    []hourglass.DueItem
	n       int   // rows the database returned
	lastKey int64 // the last row's key
	lastAt  any   // the last row's deadline as the driver gave it
}

// readPage reads (key, deadline) rows.
func (t *Table) readPage(rows Rows, err error) (page, error) {
	var p page
	if err != nil {
		return p, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key int64
			v   any
		)
		if err := rows.Scan(&key, &v); err != nil {
			return p, err
		}
		p.n, p.lastKey, p.lastAt = p.n+1, key, v
		at, reason := t.deadlineOf(v)
		if reason != "" {
			t.met.add(hourglass.BadSourceRow{Key: strconv.FormatInt(key, 10), Deadline: text(v), Reason: reason})
			continue
		}
		p.rows = append(p.rows, hourglass.DueItem{ID: key, At: at})
	}
	return p, rows.Err()
}

// deadlineOf reads a deadline as the driver gives it, or says why it
// cannot (a hourglass.Bad* reason).
func (t *Table) deadlineOf(v any) (time.Time, string) {
	var at time.Time
	if t.ms {
		ms, err := asInt(v)
		if err != nil {
			return at, hourglass.BadDeadlineUnreadable
		}
		if ms < hourglass.SourceDeadlineMinMs || ms > hourglass.SourceDeadlineMaxMs {
			return at, hourglass.BadDeadlineOutOfRange
		}
		return hourglass.FromUnixMilli(ms), ""
	}
	at, err := asTime(v)
	switch v.(type) {
	case nil, []byte, string:
		if err != nil {
			return at, hourglass.BadDeadlineUnreadable
		}
	default:
		if err != nil { // PostgreSQL's infinities (pgtype.InfinityModifier)
			return at, hourglass.BadDeadlineOutOfRange
		}
	}
	if at = at.UTC(); !hourglass.ValidSourceDeadline(at) {
		return at, hourglass.BadDeadlineOutOfRange
	}
	return at, ""
}

// Due implements hourglass.SourceTable.
func (t *Table) Due(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	if p.Parts != nil && len(p.Parts) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	cursor := !p.After.IsZero() || p.AfterID != 0
	args := []any{t.arg(p.Until)}
	if cursor {
		args = append(args, t.arg(p.After), t.arg(p.After), p.AfterID)
	}
	var out []hourglass.DueItem
	for {
		want := p.Limit - len(out)
		pg, err := t.readPage(t.d.DB().Query(ctx, t.dueSQL(cursor, want, p.Parts, t.d.Param), args...))
		if err != nil {
			return nil, fmt.Errorf("source %s: load due rows: %w", t.src.Name, err)
		}
		out = append(out, pg.rows...)
		// A full page with a bad row in it reads on past the bad row: a
		// short answer would end the caller's paging.
		if pg.n < want || len(out) >= p.Limit {
			return out, nil
		}
		after := cursorArg(pg.lastAt)
		cursor, args = true, []any{args[0], after, after, pg.lastKey}
	}
}

// Tail implements hourglass.SourceTable.
func (t *Table) Tail(ctx context.Context, after int64, limit int) ([]hourglass.DueItem, error) {
	limit = max(limit, 1)
	var out []hourglass.DueItem
	for {
		want := limit - len(out)
		pg, err := t.readPage(t.d.DB().Query(ctx, t.tailSQL(want, t.d.Param), after))
		if err != nil {
			return nil, fmt.Errorf("source %s: tail new rows: %w", t.src.Name, err)
		}
		out = append(out, pg.rows...)
		if pg.n < want || len(out) >= limit {
			return out, nil
		}
		after = pg.lastKey // past a bad row, as Due
	}
}

// Holes implements hourglass.SourceTable.
func (t *Table) Holes(ctx context.Context, ranges [][2]int64, limit int) ([]hourglass.DueItem, error) {
	if len(ranges) == 0 {
		return nil, nil
	}
	conds := make([]string, len(ranges))
	args := make([]any, 0, 2*len(ranges))
	for i, r := range ranges {
		conds[i] = fmt.Sprintf("%s BETWEEN %s AND %s", t.key, t.d.Param(2*i+1), t.d.Param(2*i+2))
		args = append(args, r[0], r[1])
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE (%s) AND (%s) AND %s ORDER BY %s LIMIT %d",
		t.key, t.deadline, t.table, strings.Join(conds, " OR "), t.src.Pending, t.inRange, t.key, max(limit, 1))
	rows, err := t.scan(t.d.DB().Query(ctx, q, args...))
	if err != nil {
		return nil, fmt.Errorf("source %s: read rows committed late: %w", t.src.Name, err)
	}
	return rows, nil
}

// MaxKey implements hourglass.SourceTable: the largest key in range (a
// key at 2^63-1 would leave the tail nothing above it, and an unsigned
// one beyond cannot be read).
func (t *Table) MaxKey(ctx context.Context) (int64, error) {
	rows, err := t.d.DB().Query(ctx, fmt.Sprintf("SELECT COALESCE(MAX(%s), 0) FROM %s WHERE %s BETWEEN %d AND %d",
		t.key, t.table, t.key, hourglass.SourceKeyMin, hourglass.SourceKeyMax))
	if err != nil {
		return 0, fmt.Errorf("source %s: read the largest key: %w", t.src.Name, err)
	}
	defer rows.Close()
	var k int64
	if rows.Next() {
		if err := rows.Scan(&k); err != nil {
			return 0, fmt.Errorf("source %s: read the largest key: %w", t.src.Name, err)
		}
	}
	return k, rows.Err()
}

// Pending implements hourglass.SourceTable.
func (t *Table) Pending(ctx context.Context, keys []int64) ([]hourglass.DueItem, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ps := make([]string, len(keys))
	args := make([]any, len(keys))
	for i, k := range keys {
		ps[i], args[i] = t.d.Param(i+1), k
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IN (%s) AND (%s) AND %s", t.key, t.deadline, t.table, t.key, strings.Join(ps, ", "), t.src.Pending, t.inRange)
	rows, err := t.scan(t.d.DB().Query(ctx, q, args...))
	if err != nil {
		return nil, fmt.Errorf("source %s: read pending rows: %w", t.src.Name, err)
	}
	return rows, nil
}

// Close implements hourglass.SourceTable.
func (t *Table) Close(ctx context.Context, rows []hourglass.DueItem) ([]hourglass.SourceResult, error) {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b hourglass.DueItem) int { return cmp.Compare(a.ID, b.ID) })
	rows = slices.CompactFunc(rows, func(a, b hourglass.DueItem) bool { return a.ID == b.ID })
	var (
		res        []hourglass.SourceResult
		deliveries int
		err        error
	)
	for attempt := 1; ; attempt++ {
		res, deliveries, err = t.closeTx(ctx, rows)
		if err == nil || !t.d.Aborts(err) || attempt == closeAttempts || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("source %s: close %d rows: %w", t.src.Name, len(rows), err)
	}
	t.d.Committed(deliveries)
	// A no-op's row may still be pending (extended, or not yet due by the
	// database's clock): read it after the commit, not in the
	// transaction's snapshot.
	var noops []int64
	for _, r := range res {
		if r.Outcome == hourglass.SourceNoop {
			noops = append(noops, r.Key)
		}
	}
	if len(noops) > 0 {
		pending, err := t.Pending(ctx, noops)
		if err != nil {
			return res, nil // the closes committed; the runner reloads what it cannot tell
		}
		at := make(map[int64]time.Time, len(pending))
		for _, p := range pending {
			at[p.ID] = p.At
		}
		for i := range res {
			if d, ok := at[res[i].Key]; ok && res[i].Outcome == hourglass.SourceNoop {
				res[i].Pending, res[i].Deadline = true, d
			}
		}
	}
	return res, nil
}

// errRowFailed ends a close's transaction whose row must be rolled back
// alone: the close runs again without it.
var errRowFailed = errors.New("a row failed")

// errLockGaveWay ends a close's transaction whose lock statement failed:
// waited past the dialect's bound (WaitOrdered), lost a deadlock, or
// failed on a row's values. It names no row, so the close runs again without the lock statements, where each
// row's own statements name the row that waits (it is left out and
// retried alone, the others close).
var errLockGaveWay = errors.New("a lock statement gave way")

// closeTx runs Close's transaction: it locks the rows of the batch the
// shop does not hold (SkipLocked), then runs every such row's guard,
// reads the deadlines of the rows whose guard changed one row, then runs
// their other statements (each step one round trip where the database
// pipelines), then the events. A row
// the shop holds is left out at once (SourceBlocked), without waiting. A
// row whose guard changed several rows, or one of whose statements failed
// (a constraint) or waited for a lock past the dialect's bound (a stock
// row the shop holds; Blocked), must leave no change behind: the
// transaction is rolled back and run again without it (no savepoints:
// more than 64 subtransactions in one transaction slow every session of a
// PostgreSQL server, and such rows are rare; a lock wait costs the batch
// that wait once, not once per row after it).
func (t *Table) closeTx(ctx context.Context, rows []hourglass.DueItem) (res []hourglass.SourceResult, deliveries int, err error) {
	excluded := map[int64]hourglass.SourceResult{}
	pipe := true
	lockGaveWay := false
	for {
		var failed hourglass.SourceResult
		wait := WaitRow
		if len(rows) > 1 {
			wait = WaitBatch
		}
		err = t.d.InTx(ctx, wait, func(tx Querier) error {
			res, deliveries = res[:0], 0
			var todo []int // indexes in res of the rows to close
			for _, r := range rows {
				out := hourglass.SourceResult{Key: r.ID, Deadline: r.At}
				if x, ok := excluded[r.ID]; ok {
					out = x
				} else {
					todo = append(todo, len(res))
				}
				res = append(res, out)
			}
			todo, err := t.lockRows(ctx, tx, res, todo)
			if err != nil {
				return err
			}
			guards := make([]Stmt, len(todo))
			for i, j := range todo {
				guards[i] = t.stmt(0, res[j].Key)
			}
			counts, at, err := execAll(ctx, tx, guards, pipe)
			if at >= 0 {
				if fail, ok := t.rowFailed(err, res[todo[at]], 0); ok {
					failed = fail
					return errRowFailed
				}
				return err
			}
			var closing []int
			for i, j := range todo {
				switch n := counts[i]; {
				case n == 0:
					res[j].Outcome = hourglass.SourceNoop
				case n > 1:
					failed = res[j]
					failed.Outcome, failed.Affected = hourglass.SourceGuardError, n
					return errRowFailed
				default:
					closing = append(closing, j)
				}
			}
			if len(closing) == 0 {
				return nil
			}
			// The event names the deadline the row had when it closed, which
			// is the one timed unless the shop moved it meanwhile (an
			// extension that committed after a close's attempt gave way to
			// it, the close retried once the new deadline had passed). Read
			// before the other statements: those lock the shop's hot rows
			// (stock), held from then until the commit.
			if err := t.readDeadlines(ctx, tx, res, closing); err != nil {
				return err
			}
			if !lockGaveWay && len(t.lock) > 0 {
				if err := t.runLock(ctx, tx, wait, res, closing, pipe); err != nil {
					return err
				}
			}
			var rest []Stmt
			var owner []int // index in res of each statement's row
			for _, j := range closing {
				for k := 1; k < len(t.stmts); k++ {
					rest = append(rest, t.stmt(k, res[j].Key))
					owner = append(owner, j)
				}
			}
			if _, at, err := execAll(ctx, tx, rest, pipe); at >= 0 {
				if fail, ok := t.rowFailed(err, res[owner[at]], 1+at%(len(t.stmts)-1)); ok {
					failed = fail
					return errRowFailed
				}
				return err
			}
			now, err := t.d.NowMs(ctx, tx)
			if err != nil {
				return fmt.Errorf("read now: %w", err)
			}
			closedAt := hourglass.FromUnixMilli(now)
			by := hourglass.CloserFrom(ctx)
			evs := make([]Event, len(closing))
			for i, j := range closing {
				res[j].Outcome, res[j].ClosedAt = hourglass.SourceClosed, closedAt
				id := hourglass.NewEventID()
				evs[i] = Event{Type: hourglass.EventSourceClosed, ID: id, OrderID: hourglass.SourceEventOrderID(t.src.Name, res[j].Key), At: now,
					Body: hourglass.MarshalSourceEvent(id, t.src.Name, res[j].Key, res[j].Deadline, closedAt), By: by}
			}
			deliveries, err = t.d.WriteEvents(ctx, tx, evs)
			if err != nil {
				return fmt.Errorf("write source.closed events: %w", err)
			}
			return nil
		})
		switch {
		case errors.Is(err, ErrUnpipelined) && (!t.d.Aborts(err) || t.d.Blocked(err) && pipe):
			// Run one statement at a time to name the failing row (a lock
			// wait in a packet: the row it was for).
			pipe = false
		case errors.Is(err, errRowFailed):
			excluded[failed.Key] = failed
		case errors.Is(err, errLockGaveWay):
			lockGaveWay = true
		default:
			return res, deliveries, err
		}
	}
}

// runLock runs the source's lock statements with :keys bound to the keys
// of res[j], j in closing, waiting WaitOrdered for their locks, then
// restores wait (one round trip where the database pipelines). Any
// failure but the context's is errLockGaveWay.
func (t *Table) runLock(ctx context.Context, tx Querier, wait Wait, res []hourglass.SourceResult, closing []int, pipe bool) error {
	keys := make([]any, len(closing))
	for i, j := range closing {
		keys[i] = res[j].Key
	}
	var stmts []Stmt
	ordered, restore := t.d.LockWaitSQL(WaitOrdered), t.d.LockWaitSQL(wait)
	if ordered != "" {
		stmts = append(stmts, Stmt{SQL: ordered})
	}
	for _, q := range t.lock {
		q, uses := hourglass.BindKeys(q, len(keys), t.d.Param)
		args := make([]any, 0, uses*len(keys))
		for range uses {
			args = append(args, keys...)
		}
		stmts = append(stmts, Stmt{SQL: q, Args: args})
	}
	if restore != "" {
		stmts = append(stmts, Stmt{SQL: restore})
	}
	// Only a dialect that sets waits in SQL pipelines them (PostgreSQL's
	// pipeline takes a SELECT; MySQL's multi-statement packet is for
	// statements that change rows).
	_, at, err := execAll(ctx, tx, stmts, pipe && ordered != "")
	if at < 0 {
		return nil
	}
	if ordered != "" {
		at--
	}
	if ctx.Err() != nil {
		return fmt.Errorf("lock[%d]: %w", max(at, 0), err)
	}
	// Any other failure names no row either (a lock wait, or a value of
	// one row's that the statement cannot take): the close runs row by
	// row, where the row's own statements fail it alone.
	return fmt.Errorf("lock[%d]: %w: %s", max(at, 0), errLockGaveWay, oneLine(err))
}

// rowFailed is the outcome of r whose statement i failed with err, when
// that fails r alone: a lock wait or deadlock (SourceBlocked), or an
// error that leaves the transaction usable (SourceFailed). ok is false
// for an error that ends the whole close.
func (t *Table) rowFailed(err error, r hourglass.SourceResult, i int) (out hourglass.SourceResult, ok bool) {
	if errors.Is(err, ErrUnpipelined) {
		return r, false
	}
	out = r
	out.Err = fmt.Errorf("close[%d]: %s", i, oneLine(err))
	switch {
	case t.d.Blocked(err):
		out.Outcome = hourglass.SourceBlocked
	case t.d.Aborts(err):
		return r, false
	default:
		out.Outcome = hourglass.SourceFailed
	}
	return out, true
}

// lockRows locks the source's rows of res[j], j in todo, that no other
// transaction holds, and returns the indexes of those it locked (in
// order). A row another transaction holds is SourceBlocked; one that is
// gone (deleted) a SourceNoop; neither runs a statement. A guard that
// updates its row then never waits for the shop's lock on it, and the
// shop's pay that waits for the batch's lock waits for one commit.
func (t *Table) lockRows(ctx context.Context, tx Querier, res []hourglass.SourceResult, todo []int) ([]int, error) {
	if len(todo) == 0 {
		return todo, nil
	}
	keysOf := func(idx []int) ([]any, string) {
		ps := make([]string, len(idx))
		args := make([]any, len(idx))
		for i, j := range idx {
			ps[i], args[i] = t.d.Param(i+1), res[j].Key
		}
		return args, strings.Join(ps, ", ")
	}
	args, _ := keysOf(todo)
	locked, err := t.keys(ctx, tx, t.d.LockKeys(t.table, t.key, len(todo)), args)
	if err != nil {
		return nil, fmt.Errorf("lock the batch's rows: %w", err)
	}
	if len(locked) == len(todo) {
		return todo, nil
	}
	var got, missing []int
	for _, j := range todo {
		if locked[res[j].Key] {
			got = append(got, j)
		} else {
			missing = append(missing, j)
		}
	}
	args, in := keysOf(missing)
	exist, err := t.keys(ctx, tx, fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s)", t.key, t.table, t.key, in), args)
	if err != nil {
		return nil, fmt.Errorf("read the batch's locked rows: %w", err)
	}
	for _, j := range missing {
		if exist[res[j].Key] {
			res[j].Outcome, res[j].Err = hourglass.SourceBlocked, errors.New("the row is locked by another transaction")
		} else {
			res[j].Outcome = hourglass.SourceNoop
		}
	}
	return got, nil
}

// keys runs q, which reads one key column, and returns the keys read.
func (t *Table) keys(ctx context.Context, tx Querier, q string, args []any) (map[int64]bool, error) {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

// readDeadlines sets the Deadline of res[j], for each j of closing, to its
// row's deadline as the transaction sees it.
func (t *Table) readDeadlines(ctx context.Context, tx Querier, res []hourglass.SourceResult, closing []int) error {
	ps := make([]string, len(closing))
	args := make([]any, len(closing))
	at := make(map[int64]int, len(closing))
	for i, j := range closing {
		ps[i], args[i] = t.d.Param(i+1), res[j].Key
		at[res[j].Key] = j
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IN (%s)", t.key, t.deadline, t.table, t.key, strings.Join(ps, ", "))
	rows, err := t.scan(tx.Query(ctx, q, args...))
	if err != nil {
		return fmt.Errorf("read the closed rows' deadlines: %w", err)
	}
	for _, r := range rows {
		if j, ok := at[r.ID]; ok {
			res[j].Deadline = r.At
		}
	}
	return nil
}

// stmt is close statement i bound to key.
func (t *Table) stmt(i int, key int64) Stmt {
	st := t.stmts[i]
	args := make([]any, len(st.Params))
	for j := range args {
		args[j] = key
	}
	return Stmt{SQL: st.SQL, Args: args}
}

// oneLine is err's text on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// asTime reads a TIMESTAMP/DATETIME value as the driver gives it: a
// time.Time, or the text of one (MySQL without parseTime), in UTC.
func asTime(v any) (time.Time, error) {
	switch v := v.(type) {
	case time.Time:
		return v, nil
	case []byte:
		return time.ParseInLocation("2006-01-02 15:04:05.999999", string(v), time.UTC)
	case string:
		return time.ParseInLocation("2006-01-02 15:04:05.999999", v, time.UTC)
	}
	return time.Time{}, fmt.Errorf("a %T, not a time", v)
}
