package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sourcesql"
)

// Sources (hourglass.SourceStore): the shop's tables live in hourglass's
// database, in a schema of their own; package sourcesql holds the queries
// and the close's transaction, this file what PostgreSQL does its way.

var _ hourglass.SourceStore = (*Store)(nil)

// OpenSource implements hourglass.SourceStore.
func (s *Store) OpenSource(ctx context.Context, src hourglass.Source) (hourglass.SourceTable, []string, error) {
	t, warnings, err := sourcesql.Open(ctx, sourceDialect{s}, src)
	if err != nil {
		return nil, nil, err
	}
	return t, warnings, nil
}

// sourceDialect is PostgreSQL to package sourcesql.
type sourceDialect struct{ s *Store }

func (sourceDialect) Param(n int) string        { return "$" + strconv.Itoa(n) }
func (sourceDialect) Quote(ident string) string { return pgx.Identifier{ident}.Sanitize() }
func (d sourceDialect) DB() sourcesql.Querier   { return pgQuerier{d.s.pool} }

// pgQuerier adapts a pool or a transaction.
type pgQuerier struct {
	q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	}
}

func (q pgQuerier) Query(ctx context.Context, sql string, args ...any) (sourcesql.Rows, error) {
	rows, err := q.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (q pgQuerier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

// ExecAll implements sourcesql.Pipeliner: one round trip.
func (q pgQuerier) ExecAll(ctx context.Context, stmts []sourcesql.Stmt) ([]int64, int, error) {
	tx, ok := q.q.(pgx.Tx)
	if !ok || len(stmts) == 0 {
		return nil, -1, nil
	}
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue(st.SQL, st.Args...)
	}
	br := tx.SendBatch(ctx, b)
	counts := make([]int64, 0, len(stmts))
	for i := range stmts {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return counts, i, err
		}
		counts = append(counts, tag.RowsAffected())
	}
	if err := br.Close(); err != nil {
		return counts, len(stmts) - 1, err
	}
	return counts, -1, nil
}

// sourceLockTimeout bounds how long a close waits for a row lock of the
// shop's tables. A close locks the rows of many orders (a batch), the
// shop's own transactions lock theirs in their own order, and PostgreSQL
// looks for a deadlock only after deadlock_timeout (1 s by default, and
// only a superuser may lower it): a close in a deadlock with the shop's
// create or pay path would wait that long before either gives way. Giving
// up after this long instead breaks the cycle at once: the row whose
// statement waited is left out of the batch and retried alone (Blocked:
// lock_not_available), the shop's transaction goes on. The source's own
// rows are locked with SKIP LOCKED first and never waited for; this bounds
// the waits for the other rows the statements change (stock).
const sourceLockTimeout = "100ms"

// sourceBatchLockTimeout is sourceLockTimeout for a close of several rows:
// while a statement waits, the batch holds every stock row its earlier
// rows locked, and the shop's creates and pays queue behind them; it gives
// way sooner, and the row it waited for is closed alone after, with
// sourceLockTimeout.
const sourceBatchLockTimeout = "20ms"

// sourceOrderedLockTimeout bounds the wait of a source's lock statements
// (WaitOrdered), which lock the rows several closes change in one order
// (SKU order): a wait for them is a queue behind the shop's transactions
// that lock in the same order, not a cycle, so it may last longer than a
// batch's. It stays well under deadlock_timeout, so that a cycle with a
// shop that locks in no fixed order costs the close (which then runs
// without its lock statements, row by row) and not the shop.
const sourceOrderedLockTimeout = "50ms"

// lockTimeout is the lock_timeout of wait.
func lockTimeout(wait sourcesql.Wait) string {
	switch wait {
	case sourcesql.WaitBatch:
		return sourceBatchLockTimeout
	case sourcesql.WaitOrdered:
		return sourceOrderedLockTimeout
	}
	return sourceLockTimeout
}

func (sourceDialect) LockWaitSQL(wait sourcesql.Wait) string {
	return "SET LOCAL lock_timeout = '" + lockTimeout(wait) + "'"
}

func (d sourceDialect) InTx(ctx context.Context, wait sourcesql.Wait, fn func(tx sourcesql.Querier) error) error {
	// One round trip: the BEGIN and the wait, sent as one simple query.
	return pgx.BeginTxFunc(ctx, d.s.pool, pgx.TxOptions{BeginQuery: "BEGIN; " + d.LockWaitSQL(wait)}, func(tx pgx.Tx) error {
		return fn(pgQuerier{tx})
	})
}

func (d sourceDialect) Columns(ctx context.Context, schema, table string) (map[string]string, error) {
	rows, err := d.s.pool.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = COALESCE(NULLIF($1, ''), current_schema()) AND table_name = $2`, schema, table)
	if err != nil {
		return nil, err
	}
	cols := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error { cols[name] = typ; return nil })
	return cols, err
}

func (d sourceDialect) Prepare(ctx context.Context, q string) error {
	c, err := d.s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	_, err = c.Conn().Prepare(ctx, "", q)
	return err
}

// Scans explains q with sequential scans disabled: a Seq Scan left in the
// plan then means no index can serve it (on a small table the planner
// would choose one anyway).
func (d sourceDialect) Scans(ctx context.Context, q string) ([]string, error) {
	tx, err := d.s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) // nothing to keep
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		return nil, err
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, pgx.QueryExecModeSimpleProtocol).Scan(&plan); err != nil {
		return nil, err
	}
	var top []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &top); err != nil {
		return nil, fmt.Errorf("read the plan: %w", err)
	}
	var scans []string
	for _, p := range top {
		p.Plan.seqScans(&scans)
	}
	return scans, nil
}

type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Schema   string     `json:"Schema"`
	Plans    []planNode `json:"Plans"`
}

func (p planNode) seqScans(out *[]string) {
	if p.NodeType == "Seq Scan" && p.Relation != "" {
		*out = append(*out, p.Relation)
	}
	for _, c := range p.Plans {
		c.seqScans(out)
	}
}

func (d sourceDialect) NowMs(ctx context.Context, tx sourcesql.Querier) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT COALESCE($1::bigint, `+dbNow+`)`, d.s.nowArg())
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

// sourceEventsSQL writes the events with their types and bodies and
// their deliveries to every webhook subscribed to the event's type or
// "*", due at the event's time, and NOTIFYs other processes' delivery
// engines at commit when it wrote any.
const sourceEventsSQL = `WITH v AS (
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $6::text[], $7::text[], $8::text[]) AS v(id, order_id, at, body, cause, node, type)
), e AS (
	INSERT INTO events (id, type, order_id, created_at, body, cause, node)
	SELECT v.id, v.type, v.order_id, v.at, v.body, v.cause, v.node FROM v
	RETURNING seq, type, order_id, created_at
), d AS (
	INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
	SELECT s.webhook_id, e.seq, e.order_id, 'pending', e.created_at
	FROM e JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
	RETURNING 1
), n AS (
	SELECT pg_notify($5, '') FROM (SELECT 1 FROM d LIMIT 1) AS x
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM n)`

func (d sourceDialect) WriteEvents(ctx context.Context, tx sourcesql.Querier, evs []sourcesql.Event) (int, error) {
	ids, orders, at, bodies := make([]string, len(evs)), make([]int64, len(evs)), make([]int64, len(evs)), make([]string, len(evs))
	causes, nodes, types := make([]*string, len(evs)), make([]*string, len(evs)), make([]string, len(evs))
	for i, e := range evs {
		ids[i], orders[i], at[i], bodies[i], types[i] = e.ID, e.OrderID, e.At, string(e.Body), string(e.Type)
		causes[i], nodes[i] = closerColumns(e.By)
	}
	rows, err := tx.Query(ctx, sourceEventsSQL, ids, orders, at, bodies, d.s.channel, causes, nodes, types)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n, notified int64
	if rows.Next() {
		if err := rows.Scan(&n, &notified); err != nil {
			return 0, err
		}
	}
	return int(n), rows.Err()
}

func (d sourceDialect) Committed(deliveries int) {
	if deliveries > 0 {
		d.s.w.NotifyDeliveries()
	}
}

func (sourceDialect) Aborts(err error) bool {
	c := pgCode(err)
	// 55P03 lock_not_available: sourceLockTimeout passed.
	return c == "40001" || c == "40P01" || c == "55P03" || unavailable(err) || c == "25P02"
}

// Blocked: 55P03 lock_not_available (sourceLockTimeout passed) or 40P01
// deadlock_detected.
func (sourceDialect) Blocked(err error) bool {
	c := pgCode(err)
	return c == "55P03" || c == "40P01"
}

// LockKeys takes the lock an UPDATE that leaves the key alone takes (a
// shop's FOR KEY SHARE, from a foreign key, does not block it); PostgreSQL
// locks only the rows a locking read returns.
func (d sourceDialect) LockKeys(table, key string, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = d.Param(i + 1)
	}
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s) FOR NO KEY UPDATE SKIP LOCKED", key, table, key, strings.Join(ps, ", "))
}

// InsertNew: ON CONFLICT DO NOTHING counts no row when the key exists.
func (d sourceDialect) InsertNew(table string, cols []string, rows int) string {
	vals := make([]string, rows)
	for r := range vals {
		ps := make([]string, len(cols))
		for i := range ps {
			ps[i] = d.Param(r*len(cols) + i + 1)
		}
		vals[r] = "(" + strings.Join(ps, ", ") + ")"
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s ON CONFLICT DO NOTHING", table, strings.Join(cols, ", "), strings.Join(vals, ", "))
}

// DeleteSome: PostgreSQL's DELETE has no LIMIT; the rows are picked by
// their ctid.
func (sourceDialect) DeleteSome(table, where string, limit int) string {
	return fmt.Sprintf("DELETE FROM %s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %s WHERE %s LIMIT %d))", table, table, where, limit)
}
