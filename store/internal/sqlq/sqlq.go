// Package sqlq is the stores' SQL for the paths that are not the group
// commit, written once: the reads of orders, timers and the event log
// (with the sinks' cursors), the webhooks, dead letters and due
// deliveries, the stats, the outbox, retention, products and the policy,
// the timer requests' apply (the decisions; each store writes what they
// arm and cancel), rejected listing, count and prune, and the cluster's
// membership and leases. Its statements use "?" placeholders (numbered for
// PostgreSQL by Rebind) and portable SQL, and run on a Querier each store
// adapts from its driver (pgx, database/sql, zombiezen's SQLite), through
// a DB that says how the store reads, writes (its transactions, retries
// and error mapping) and reads "now".
//
// It owns no connection and no schema; it imports only the domain and two
// of the stores' shared packages (plan's refusals, stored's text forms).
// The hot paths (the group commit's batches, the close) stay in each store,
// which keeps its SQL round trips there; so do the reads whose statements
// differ per store for speed (PendingDeliveries).
package sqlq

import (
	"context"
	"github.com/hourglass/hourglass/store/internal/siblings"
	"strconv"
	"strings"
	"time"
)

// Rows is a result set: pgx's, database/sql's and SQLite's, adapted.
type Rows interface {
	Next() bool
	// Scan copies the row's columns into dest: *int64, *int, *int32,
	// *string, *[]byte (nil for NULL), **int64 or **string (nil for NULL).
	Scan(dest ...any) error
	Err() error
	Close()
}

// Querier runs statements on a pool, a connection or in a transaction.
type Querier interface {
	Query(ctx context.Context, q string, args ...any) (Rows, error)
	// Exec returns the rows the statement changed.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
}

// Lane is how urgent a write is, for a store whose writes queue (SQLite):
// Normal beside the API's writes, Low for bookkeeping nobody waits on.
type Lane int

const (
	Normal Lane = iota
	Low
)

// DB is one store's database as this package uses it.
type DB interface {
	// Read runs fn on a connection for reads; errors it returns are mapped
	// as the store maps them (op names the operation).
	Read(ctx context.Context, op string, fn func(q Querier) error) error
	// Write runs fn in one transaction, again after a lost race as the
	// store's retry policy allows; fn must be safe to run again. Errors are
	// mapped; an *hourglass.Error fn returns is passed through unchanged.
	Write(ctx context.Context, op string, lane Lane, fn func(q Querier) error) error
	// NowArg is the argument bound to Dialect.Now.
	NowArg() any
}

// Dialect is what differs in the SQL text.
type Dialect struct {
	// Numbered makes placeholders $1, $2, … (PostgreSQL).
	Numbered bool
	// Now is "now" in unix ms as an SQL expression with one placeholder,
	// bound to DB.NowArg: the test clock's value, or NULL for the server's
	// clock.
	Now string
	// Upsert is the clause that turns an INSERT into table into an upsert
	// on the unique key keys, setting each column of cols to the inserted
	// value; greatest names the columns that keep the larger of the two
	// instead.
	Upsert func(table, keys string, cols []string, greatest map[string]bool) string
	// From is the FROM item of table read through its index (the hint
	// that makes the planner use it), or the table alone.
	From func(table, index string) string
	// IntDiv is the integer division operator ("/" or "DIV").
	IntDiv string
	// After is the keyset condition "(col, idCol) > (at, id)" in the form
	// the database's planner turns into one index range, with its
	// arguments.
	After func(col, idCol string, at, id int64) (string, []any)
	// TimerKey is the name of the timers' key column.
	TimerKey string
	// KeyArg, when set, is a timer's key as its column compares it (nil:
	// the string).
	KeyArg func(key string) any
	// InParts is the condition that the partition of the id column col
	// (col % 64) is in the mask bound to its one placeholder.
	InParts func(col string) string
	// ByID, when set, is the FROM item that reads the rows of table whose
	// ids are in the array bound to its one placeholder, each by one
	// primary-key look-up, as alias; unset, the rows are table's WHERE id
	// IN (…). PostgreSQL's planner, whose statistics (or cached plan) still
	// counted a few hundred pending deliveries after a burst's fan-out wrote
	// 100,000, ANDed a bitmap of every pending row with the ids': 40 ms a
	// read of 8 deliveries instead of about 1 ms (docs/benchmarks/
	// webhooks.md).
	ByID func(table, alias string) string
	// ByKey follows the alias of a table read by primary key with ByID
	// unset: the hint that keeps the planner to that key (SQLite's " NOT
	// INDEXED", MySQL's " FORCE INDEX (PRIMARY)"). Asked for "id IN (…) AND
	// state = 'pending'", SQLite otherwise scanned the pending rows of the
	// (state, next_attempt_at) index, and a burst's reads of its deliveries
	// took twice as long.
	ByKey string

	// Retention's (retention.go):

	// DeleteLimit says DELETE takes ORDER BY and LIMIT itself (MySQL and
	// MariaDB, which refuse a subquery reading the table a DELETE deletes
	// from); elsewhere a bounded DELETE takes the keys a subquery selects.
	DeleteLimit bool
	// FanoutLists is the condition that the fanout_pending row p lists the
	// event whose seq is the expression seq (the table's form differs: an
	// array, a comma-separated list, a range).
	FanoutLists func(seq string) string

	// Webhooks' (webhooks.go):

	// Returning says INSERT and UPDATE take a RETURNING clause; without
	// it, the Querier of a write must be an Inserter (MySQL).
	Returning bool
	// Cascade says the foreign keys of webhook_subscriptions and
	// webhook_deliveries delete a webhook's rows with it (PostgreSQL);
	// otherwise DeleteWebhook deletes them first.
	Cascade bool
	// LockWebhooks, when not empty, is the statement CreateWebhook runs
	// before it counts the webhooks for a limit, so that creates racing in
	// any process count one after the other; it must return a row.
	LockWebhooks string
	// CountedWebhooks, when not empty, runs after that count with the
	// count plus one bound: it writes what LockWebhooks locked, for a
	// cluster whose row locks are one node's alone (Galera), where only
	// conflicting writes make one of two racing creates run again.
	CountedWebhooks string

	// Timer requests' (requests.go):

	// RequestTime is the SQL expression that reads the time column col of
	// timer_requests or timer_request_errors as text, NULL when it is
	// NULL: a shop writes those rows, and each store keeps their times in
	// its own type.
	RequestTime func(col string) string
	// ParseRequestTime reads a RequestTime that is not NULL: its time, or
	// the reason the request is rejected with when it holds none (bad),
	// and then what a listing shows (t: nil, or a zero time for a zero
	// date).
	ParseRequestTime func(col, text string) (t *time.Time, bad string)
	// OneWriter says the store's one writer applies the timer requests, so
	// no other transaction can hold one: the batch is taken without FOR
	// UPDATE SKIP LOCKED, no key is held back, and the batch's DELETE is
	// every request up to its last.
	OneWriter bool
	// KeepFirst is the clause that makes an INSERT into table skip a row
	// whose unique key is there already.
	KeepFirst func(table, key string) string
	// Arrays says a list is bound as one array (col = ANY (?)), not a
	// placeholder each.
	Arrays bool

	// The cluster's (cluster.go):

	// DBNode, when not empty, is the expression naming the database server
	// a statement reached, which Heartbeat writes to cluster_nodes.db_node
	// and ClusterState reads into hourglass.Node.DBNode: on Galera, the
	// node whose clock the heartbeat read. Empty: no such column.
	DBNode string
}

// OnConflict is Dialect.Upsert for PostgreSQL and SQLite: max is the name
// of their larger-of-two function ("GREATEST", "max").
func OnConflict(max string) func(string, string, []string, map[string]bool) string {
	return func(table, keys string, cols []string, greatest map[string]bool) string {
		var b strings.Builder
		b.WriteString(" ON CONFLICT (" + keys + ") DO UPDATE SET ")
		for i, c := range cols {
			if i > 0 {
				b.WriteString(", ")
			}
			if greatest[c] {
				b.WriteString(c + " = " + max + "(" + table + "." + c + ", excluded." + c + ")")
			} else {
				b.WriteString(c + " = excluded." + c)
			}
		}
		return b.String()
	}
}

// OnDuplicateKey is Dialect.Upsert for MySQL and MariaDB.
func OnDuplicateKey(_, _ string, cols []string, greatest map[string]bool) string {
	var b strings.Builder
	b.WriteString(" ON DUPLICATE KEY UPDATE ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		if greatest[c] {
			b.WriteString(c + " = GREATEST(" + c + ", VALUES(" + c + "))")
		} else {
			b.WriteString(c + " = VALUES(" + c + ")")
		}
	}
	return b.String()
}

// Rebind numbers the "?" placeholders of q ($1, $2, …), leaving quoted
// strings and identifiers alone.
func Rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// in is the condition that col is one of vals, with its arguments: one
// array (Dialect.Arrays), or a placeholder each.
func in[T int64 | string](d Dialect, col string, vals []T) (string, []any) {
	if d.Arrays {
		return col + ` = ANY (?)`, []any{vals}
	}
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	return col + ` IN (?` + strings.Repeat(`, ?`, len(vals)-1) + `)`, args
}

// Placeholders returns "(?, ?, …), (…)…": rows groups of width marks.
func Placeholders(rows, width int) string {
	one := "(" + strings.Repeat("?, ", width-1) + "?)"
	return one + strings.Repeat(", "+one, rows-1)
}

// Store is the SQL of one store's database.
type Store struct {
	d  Dialect
	db DB
	// siblings is what the cluster reads through this store value say of
	// the other nodes on its database (Shared).
	siblings siblings.Tracker
}

// New returns the SQL of db, written in d.
func New(d Dialect, db DB) *Store { return &Store{d: d, db: db} }

// DB returns the database s runs on: a store's own transactions that run
// sqlq's statements in them (ApplyBulk).
func (s *Store) DB() DB { return s.db }

// q is a Querier that rebinds for the dialect.
type q struct {
	Querier
	numbered bool
}

func (s *Store) wrap(x Querier) q { return q{x, s.d.Numbered} }

func (x q) query(ctx context.Context, sql string, args ...any) (Rows, error) {
	if x.numbered {
		sql = Rebind(sql)
	}
	return x.Querier.Query(ctx, sql, args...)
}

func (x q) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if x.numbered {
		sql = Rebind(sql)
	}
	return x.Querier.Exec(ctx, sql, args...)
}

// row runs a query of at most one row into dest; found is false for none.
func (x q) row(ctx context.Context, sql string, args []any, dest ...any) (found bool, err error) {
	rows, err := x.query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	if err := rows.Scan(dest...); err != nil {
		return false, err
	}
	// Read to the end, as database/sql's Row.Scan does: an error can follow
	// the row (on Galera, the abort of a transaction that lost to another
	// node's commit), and a transaction must not commit past it.
	for rows.Next() {
	}
	return true, rows.Err()
}

// each runs a query and calls fn after scanning each row into dest.
func (x q) each(ctx context.Context, sql string, args []any, dest []any, fn func() error) error {
	rows, err := x.query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
	}
	return rows.Err()
}

// read runs fn on a read connection.
func (s *Store) read(ctx context.Context, op string, fn func(x q) error) error {
	return s.db.Read(ctx, op, func(x Querier) error { return fn(s.wrap(x)) })
}

// write runs fn in one transaction.
func (s *Store) write(ctx context.Context, op string, lane Lane, fn func(x q) error) error {
	return s.db.Write(ctx, op, lane, func(x Querier) error { return fn(s.wrap(x)) })
}
