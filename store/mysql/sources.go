package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sourcesql"
	"github.com/hourglass/hourglass/store/internal/writer"
)

// Sources (hourglass.SourceStore): the shop's tables live in another
// database of hourglass's server; package sourcesql holds the queries and
// the close's transaction, this file what MySQL does its way.

var _ hourglass.SourceStore = (*Store)(nil)

// sourcePool is the connections the sources' statements run on, opened
// with the first source: the store's session settings, but RowsAffected
// counts the rows changed (the guard must change exactly one: a row it
// matched already closed is not a close), a close's statements go to the
// server several at a time (multiStatements; the keys are integers the
// driver inlines), and a statement waits at most sourceLockWait for a
// row lock the shop holds.
type sourcePool struct {
	once sync.Once
	db   *sql.DB
	err  error
}

// sourceLockWait is the source sessions' innodb_lock_wait_timeout, in
// seconds (the store's is 10). InnoDB finds a deadlock at once (error
// 1213), so a wait this long is a row a close's statement needs (a stock
// row) held that long: by the shop's transaction, or by the source's other
// close batch on a hot SKU, which commits within it (1 s was too short
// for a burst's batches of 500 rows on one SKU on a loaded machine). The
// row is left out of its batch and retried alone. The source's own rows
// are locked with SKIP LOCKED first and never waited for.
const sourceLockWait = 3

func (p *sourcePool) get(conf *gomysql.Config) (*sql.DB, error) {
	p.once.Do(func() {
		mc := conf.Clone()
		mc.ClientFoundRows = false
		mc.MultiStatements = true
		mc.Params = maps.Clone(mc.Params)
		mc.Params["innodb_lock_wait_timeout"] = strconv.Itoa(sourceLockWait)
		p.db, p.err = openPool(mc, 8, 5*time.Minute)
	})
	return p.db, p.err
}

func (p *sourcePool) close() {
	if p.db != nil {
		p.db.Close()
	}
}

// OpenSource implements hourglass.SourceStore.
func (s *Store) OpenSource(ctx context.Context, src hourglass.Source) (hourglass.SourceTable, []string, error) {
	db, err := s.sourcePool.get(s.server.conf)
	if err != nil {
		return nil, nil, err
	}
	t, warnings, err := sourcesql.Open(ctx, sourceDialect{s, db}, src)
	if err != nil {
		return nil, nil, err
	}
	return t, warnings, nil
}

// sourceDialect is MySQL to package sourcesql: catalogue reads on the
// store's pool, the source's statements on db (sourcePool).
type sourceDialect struct {
	s  *Store
	db *sql.DB
}

func (sourceDialect) Param(int) string { return "?" }
func (sourceDialect) Quote(ident string) string {
	return "`" + strings.ReplaceAll(ident, "`", "``") + "`"
}
func (d sourceDialect) DB() sourcesql.Querier { return sqlQuerier{q: d.db} }

// sqlQuerier adapts a pool or a transaction.
type sqlQuerier struct {
	q interface {
		QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
		ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	}
	// conn is the connection a source's transaction (q) runs on, nil on
	// a pool: ExecAll reads each statement's row count through it (the
	// driver's mysql.Result, which database/sql's result hides).
	conn *sql.Conn
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

func (q sqlQuerier) Query(ctx context.Context, query string, args ...any) (sourcesql.Rows, error) {
	rows, err := q.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// ExecAll implements sourcesql.Pipeliner: the statements in packets of
// up to 64, each one multi-statement round trip. A packet that fails has
// run the statements before the failing one: ExecAll then returns
// sourcesql.ErrUnpipelined (unless the error ends the transaction), and
// the close runs again one statement at a time to name it.
func (q sqlQuerier) ExecAll(ctx context.Context, stmts []sourcesql.Stmt) ([]int64, int, error) {
	counts := make([]int64, 0, len(stmts))
	for start := 0; start < len(stmts); start += 64 {
		part := stmts[start:min(start+64, len(stmts))]
		var (
			sb   strings.Builder
			args []any
		)
		for i, st := range part {
			if i > 0 {
				sb.WriteString(";\n")
			}
			sb.WriteString(st.SQL)
			args = append(args, st.Args...)
		}
		all, err := q.execMulti(ctx, sb.String(), args)
		if err != nil {
			return counts, start, fmt.Errorf("%w: %w", sourcesql.ErrUnpipelined, err)
		}
		if len(all) != len(part) {
			return counts, start, fmt.Errorf("%w: the server answered %d statements of %d sent", sourcesql.ErrUnpipelined, len(all), len(part))
		}
		counts = append(counts, all...)
	}
	return counts, -1, nil
}

// execMulti runs statements sent as one (multiStatements) on the
// transaction's connection and returns each one's row count. database/sql
// wraps the driver's result in one that has only the last statement's
// count, so the statements go to the driver itself, on the connection the
// transaction holds (between its statements: database/sql serialises
// both on the connection's lock).
func (q sqlQuerier) execMulti(ctx context.Context, query string, args []any) ([]int64, error) {
	if q.conn == nil {
		return nil, errors.New("statements sent as one need a transaction's connection")
	}
	var counts []int64
	err := q.conn.Raw(func(dc any) error {
		ex, ok := dc.(driver.ExecerContext)
		if !ok {
			return fmt.Errorf("the driver's connection (%T) cannot execute", dc)
		}
		named := make([]driver.NamedValue, len(args))
		for i, a := range args {
			named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
			if c, ok := dc.(driver.NamedValueChecker); ok {
				if err := c.CheckNamedValue(&named[i]); err != nil {
					return fmt.Errorf("argument %d: %w", i+1, err)
				}
			}
		}
		res, err := ex.ExecContext(ctx, query, named)
		if err != nil {
			return err
		}
		r, ok := res.(gomysql.Result)
		if !ok {
			return fmt.Errorf("the driver's result (%T) has no count per statement", res)
		}
		counts = r.AllRowsAffected()
		return nil
	})
	return counts, err
}

func (q sqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// InsertID implements sqlq.Inserter: MySQL has no INSERT … RETURNING.
func (q sqlQuerier) InsertID(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// LockWaitSQL: every statement of MySQL's sources waits sourceLockWait
// (InnoDB finds a cycle at once, and a wait cannot be shorter than 1 s).
func (sourceDialect) LockWaitSQL(sourcesql.Wait) string { return "" }

// InTx: a batch waits as long as one row (sourceLockWait is MySQL's least).
func (d sourceDialect) InTx(ctx context.Context, _ sourcesql.Wait, fn func(tx sourcesql.Querier) error) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(sqlQuerier{q: tx, conn: conn}); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (d sourceDialect) Columns(ctx context.Context, schema, table string) (map[string]string, error) {
	rows, err := d.s.db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`, schema, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		cols[name] = strings.ToLower(typ)
	}
	return cols, rows.Err()
}

func (d sourceDialect) Prepare(ctx context.Context, q string) error {
	st, err := d.s.db.PrepareContext(ctx, q)
	if err != nil {
		return err
	}
	return st.Close()
}

// Scans reads EXPLAIN's rows: a table read in full (type ALL) with no
// index the optimizer could have used (possible_keys NULL). On a small
// table the optimizer may read in full anyway; possible_keys says whether
// an index exists for the query.
func (d sourceDialect) Scans(ctx context.Context, q string) ([]string, error) {
	rows, err := d.s.db.QueryContext(ctx, "EXPLAIN "+q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var scans []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := map[string]sql.NullString{}
		for i, c := range cols {
			row[strings.ToLower(c)] = vals[i]
		}
		if row["type"].String == "ALL" && !row["possible_keys"].Valid && row["table"].Valid && !strings.HasPrefix(row["table"].String, "<") {
			scans = append(scans, row["table"].String)
		}
	}
	return scans, rows.Err()
}

func (d sourceDialect) NowMs(ctx context.Context, tx sourcesql.Querier) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT `+nowExpr, d.s.nowArg())
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var ms int64
	if !rows.Next() {
		return 0, fmt.Errorf("no row: %v", rows.Err())
	}
	return ms, rows.Scan(&ms)
}

// WriteEvents inserts the events in one statement (consecutive seqs, step
// auto_increment_increment, as the order batches rely on), then their
// deliveries to every webhook subscribed to the event's type or "*", due
// at the event's time. Other processes find them by their due scan.
func (d sourceDialect) WriteEvents(ctx context.Context, tx sourcesql.Querier, evs []sourcesql.Event) (int, error) {
	rows, err := tx.Query(ctx, `SELECT @@auto_increment_increment`)
	if err != nil {
		return 0, err
	}
	var inc int64
	if rows.Next() {
		err = rows.Scan(&inc)
	}
	rows.Close()
	if err != nil || inc <= 0 {
		return 0, fmt.Errorf("read auto_increment_increment: %v", err)
	}
	args := make([]any, 0, 7*len(evs))
	for _, e := range evs {
		cause, node := closerColumns(e.By)
		args = append(args, e.ID, string(e.Type), e.OrderID, e.At, e.Body, cause, node)
	}
	q, ok := tx.(sqlQuerier)
	if !ok {
		return 0, fmt.Errorf("not a MySQL transaction")
	}
	res, err := q.q.ExecContext(ctx, `INSERT INTO events (id, type, order_id, created_at, body, cause, node) VALUES `+rowsOf(len(evs), `(?, ?, ?, ?, ?, ?, ?)`), args...)
	if err != nil {
		return 0, fmt.Errorf("insert events: %w", err)
	}
	first, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("insert events: %w", err)
	}
	seqs := make([]any, len(evs))
	for i := range evs {
		seqs[i] = first + int64(i)*inc
	}
	n, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT s.webhook_id, e.seq, e.order_id, 'pending', 0, e.created_at FROM events e
JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
WHERE e.seq IN (`+placeholders(len(seqs))+`) LOCK IN SHARE MODE`, seqs...)
	if err != nil {
		return 0, fmt.Errorf("insert deliveries: %w", err)
	}
	return int(n), nil
}

func (d sourceDialect) Committed(deliveries int) {
	if deliveries > 0 {
		d.s.w.NotifyDeliveries()
	}
}

func (d sourceDialect) Aborts(err error) bool {
	k := d.s.classify(err).Kind
	return k == writer.Retry || k == writer.Unavailable
}

// Blocked: 1205 lock wait timeout (sourceLockWait passed; InnoDB rolled
// back the statement) or 1213 deadlock (InnoDB rolled back the
// transaction).
func (sourceDialect) Blocked(err error) bool {
	var e *gomysql.MySQLError
	return errors.As(err, &e) && (e.Number == 1205 || e.Number == 1213)
}

// LockKeys reads each key by itself, one point look-up a part of a UNION
// ALL: InnoDB locks every row a locking read scans, and a read of 500 keys
// by IN on a small table scans it (the other close batch's rows then
// skipped as locked). SKIP LOCKED: MySQL 8.0 and MariaDB 10.6 take it.
func (sourceDialect) LockKeys(table, key string, n int) string {
	part := fmt.Sprintf("(SELECT %s FROM %s WHERE %s = ? FOR UPDATE SKIP LOCKED)", key, table, key)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = part
	}
	return strings.Join(parts, " UNION ALL ")
}

// InsertNew: an update that sets a column to itself changes no row, and
// the source pool counts changed rows (ClientFoundRows off): 0 when the
// key exists. Unlike INSERT IGNORE it turns no other error into a warning.
func (d sourceDialect) InsertNew(table string, cols []string, rows int) string {
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s ON DUPLICATE KEY UPDATE %s = %s", table, strings.Join(cols, ", "),
		rowsOf(rows, "("+placeholders(len(cols))+")"), cols[0], cols[0])
}

// DeleteSome: MySQL's DELETE takes a LIMIT.
func (sourceDialect) DeleteSome(table, where string, limit int) string {
	return fmt.Sprintf("DELETE FROM %s WHERE %s LIMIT %d", table, where, limit)
}
