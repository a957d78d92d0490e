// Package txtimer arms and cancels hourglass timers inside the caller's own
// database transaction: one INSERT into hourglass's timer_requests table, in
// the transaction that creates (or pays, or cancels) the caller's order. The
// timer is armed if and only if that transaction commits, and hourglass
// applies the request exactly as PUT /v1/timers/{key} (or DELETE) would,
// within about 250 ms of the commit. There is no second write to get wrong:
// no call to hourglass after the commit that could fail, and no timer armed
// for an order whose transaction rolled back.
//
//	requests := txtimer.Table{Name: "hourglass.timer_requests", Dialect: txtimer.MySQL}
//	tx, _ := db.BeginTx(ctx, nil)
//	tx.ExecContext(ctx, "INSERT INTO orders …")
//	requests.Arm(ctx, tx, txtimer.Arm{Key: "order:42", Delay: 30 * time.Minute, Payload: []byte(`{"order":42}`)})
//	tx.Commit()
//
// Arm and Cancel take a database/sql transaction (*sql.Tx, or anything with
// ExecContext); ArmPgx and CancelPgx a pgx one (pgx.Tx, or anything with
// pgx's Exec). The request is checked here as hourglass checks it, so a bad
// one fails in the caller's transaction instead of reaching hourglass's list
// of rejected requests.
//
// It imports only the standard library and hourglass's root package; the
// caller brings its own driver.
package txtimer

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Dialect is the SQL dialect of the caller's database: it decides the
// placeholders and the quoting of the table name.
type Dialect int

// The dialects hourglass runs on beside a shop's tables.
const (
	// Postgres: hourglass's tables in a schema of the shop's database
	// (serve --database-schema), e.g. "hourglass.timer_requests".
	Postgres Dialect = iota + 1
	// MySQL (and MariaDB): hourglass's database on the shop's server,
	// reached by qualified name, e.g. "hourglass.timer_requests".
	MySQL
)

// DefaultTable is the request table's name when hourglass's tables are in
// the "hourglass" schema (PostgreSQL) or database (MySQL).
const DefaultTable = "hourglass.timer_requests"

// Table is hourglass's request table as the caller's connection names it.
type Table struct {
	// Name is the table, optionally qualified by its schema (PostgreSQL)
	// or database (MySQL): letters, digits, '_' and '$', one '.' at most.
	// Empty means DefaultTable.
	Name    string
	Dialect Dialect
}

// Arm is a request to arm (or re-arm) the timer Key. Exactly as with
// PUT /v1/timers/{key}: it fires at FireAt, or Delay after the request was
// written (the database's clock at the INSERT), once; a timer armed again
// before it fired fires only at its new time.
type Arm struct {
	// Key is 1 to 200 characters of A-Za-z0-9._:- (as the API's keys).
	Key string
	// FireAt, when not zero, is when the timer fires (a time past fires at
	// once). Otherwise it fires Delay (0 to 365 days) after the request.
	FireAt time.Time
	Delay  time.Duration
	// Payload, when not nil, is a JSON object of at most 64 KiB, carried by
	// the timer.fired event.
	Payload json.RawMessage
	// WebhookID, when not 0, is the only webhook the timer.fired event goes
	// to (it must be subscribed to timer.fired or "*").
	WebhookID int64
}

// Validate reports what hourglass would reject in a, as an error naming the
// column (hourglass.CodeInvalidArgument).
func (a Arm) Validate() error {
	if !a.FireAt.IsZero() && a.Delay != 0 {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "fire_at and delay_ms: give one of them, not both")
	}
	if a.FireAt.IsZero() && a.Delay%time.Millisecond != 0 {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "delay_ms: %s is not a whole number of milliseconds", a.Delay)
	}
	return hourglass.ArmTimerParams{Key: a.Key, FireAt: a.FireAt, Delay: a.Delay, Payload: a.Payload, WebhookID: a.WebhookID}.Validate()
}

// Execer is what Arm and Cancel need of a database/sql transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Arm writes a request to arm a.Key in tx: it takes effect if tx commits.
func (t Table) Arm(ctx context.Context, tx Execer, a Arm) error {
	query, args, err := t.arm(a)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("txtimer: arm %s: %w", a.Key, err)
	}
	return nil
}

// Cancel writes a request to cancel the timer key in tx, as DELETE
// /v1/timers/{key}: it takes effect if tx commits; a timer that fired
// already, or does not exist, is left as it is.
func (t Table) Cancel(ctx context.Context, tx Execer, key string) error {
	query, args, err := t.cancel(key)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("txtimer: cancel %s: %w", key, err)
	}
	return nil
}

// PgxExecer is what ArmPgx and CancelPgx need of a pgx transaction
// (pgx.Tx, *pgx.Conn and *pgxpool.Pool have it); the result is ignored,
// so any type does.
type PgxExecer[R any] interface {
	Exec(ctx context.Context, sql string, arguments ...any) (R, error)
}

// ArmPgx is Arm for a pgx transaction (the Postgres dialect).
func ArmPgx[R any](ctx context.Context, t Table, tx PgxExecer[R], a Arm) error {
	query, args, err := t.arm(a)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, query, args...); err != nil {
		return fmt.Errorf("txtimer: arm %s: %w", a.Key, err)
	}
	return nil
}

// CancelPgx is Cancel for a pgx transaction (the Postgres dialect).
func CancelPgx[R any](ctx context.Context, t Table, tx PgxExecer[R], key string) error {
	query, args, err := t.cancel(key)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, query, args...); err != nil {
		return fmt.Errorf("txtimer: cancel %s: %w", key, err)
	}
	return nil
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$`)

// insert returns the INSERT of columns into t, with the dialect's
// placeholders.
func (t Table) insert(columns ...string) (string, error) {
	name := t.Name
	if name == "" {
		name = DefaultTable
	}
	if !tableName.MatchString(name) {
		return "", fmt.Errorf("txtimer: table %q: want [schema.]table, letters, digits, '_' and '$'", name)
	}
	quote := func(s string) string { return `"` + s + `"` }
	switch t.Dialect {
	case Postgres:
	case MySQL:
		quote = func(s string) string { return "`" + s + "`" }
	default:
		return "", fmt.Errorf("txtimer: Table.Dialect must be txtimer.Postgres or txtimer.MySQL")
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = quote(p)
	}
	marks := make([]string, len(columns))
	for i := range columns {
		marks[i] = "?"
		if t.Dialect == Postgres {
			marks[i] = fmt.Sprintf("$%d", i+1)
		}
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", strings.Join(parts, "."), strings.Join(columns, ", "), strings.Join(marks, ", ")), nil
}

func (t Table) arm(a Arm) (string, []any, error) {
	if err := a.Validate(); err != nil {
		return "", nil, fmt.Errorf("txtimer: arm: %w", err)
	}
	query, err := t.insert("timer_key", "action", "fire_at", "delay_ms", "payload", "webhook_id")
	if err != nil {
		return "", nil, err
	}
	var fireAt, delay, payload, webhook any // NULL unless set
	if !a.FireAt.IsZero() {
		fireAt = a.FireAt.UTC().Truncate(time.Millisecond)
	} else {
		delay = a.Delay.Milliseconds()
	}
	if a.Payload != nil {
		payload = string(a.Payload)
	}
	if a.WebhookID != 0 {
		webhook = a.WebhookID
	}
	return query, []any{a.Key, "arm", fireAt, delay, payload, webhook}, nil
}

func (t Table) cancel(key string) (string, []any, error) {
	if err := hourglass.ValidateTimerKey(key); err != nil {
		return "", nil, fmt.Errorf("txtimer: cancel: %w", err)
	}
	query, err := t.insert("timer_key", "action")
	if err != nil {
		return "", nil, err
	}
	return query, []any{key, "cancel"}, nil
}
