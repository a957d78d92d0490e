package hourglasstest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hourglass/hourglass"
)

// Shop is a shop's own schema as the source documents draw it, written
// only through the shop's own connection and SQL, as an order service
// would: orders(id, user_id, status, expire_at), order_items(order_id,
// sku, qty), stock(sku, available, reserved). expire_at holds UTC.
type Shop struct {
	DB *sql.DB
	// Schema qualifies the tables: a PostgreSQL schema, or a MySQL
	// database of hourglass's server.
	Schema   string
	Postgres bool
	// Events, when set, is hourglass's events table as the shop's
	// connection names it (for tests that count source.closed events).
	Events string
}

// T is a table's qualified name.
func (s Shop) T(name string) string { return s.Schema + "." + name }

// Now is the database's now in UTC, as the shop's SQL writes it: the
// statement's clock (docs/stores.md), not PostgreSQL's now(), which is
// its transaction's start.
func (s Shop) Now() string {
	if s.Postgres {
		return "(clock_timestamp() AT TIME ZONE 'UTC')"
	}
	return "UTC_TIMESTAMP(3)"
}

// Create creates the shop's tables; index adds the index the window
// query needs.
func (s Shop) Create(t testing.TB, index bool) {
	t.Helper()
	var stmts []string
	if s.Postgres {
		stmts = []string{
			`CREATE SCHEMA IF NOT EXISTS ` + s.Schema,
			`CREATE TABLE ` + s.T("orders") + ` (id BIGSERIAL PRIMARY KEY, user_id TEXT NOT NULL, status TEXT NOT NULL, expire_at TIMESTAMP(3) NOT NULL)`,
			`CREATE TABLE ` + s.T("order_items") + ` (order_id BIGINT NOT NULL, sku TEXT NOT NULL, qty INT NOT NULL, PRIMARY KEY (order_id, sku))`,
			`CREATE TABLE ` + s.T("stock") + ` (sku TEXT PRIMARY KEY, available INT NOT NULL, reserved INT NOT NULL CHECK (reserved >= 0))`,
		}
	} else {
		stmts = []string{
			`CREATE DATABASE IF NOT EXISTS ` + s.Schema,
			`CREATE TABLE ` + s.T("orders") + ` (id BIGINT AUTO_INCREMENT PRIMARY KEY, user_id VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, expire_at DATETIME(3) NOT NULL)`,
			`CREATE TABLE ` + s.T("order_items") + ` (order_id BIGINT NOT NULL, sku VARCHAR(64) NOT NULL, qty INT NOT NULL, PRIMARY KEY (order_id, sku))`,
			`CREATE TABLE ` + s.T("stock") + ` (sku VARCHAR(64) PRIMARY KEY, available INT NOT NULL, reserved INT NOT NULL, CHECK (reserved >= 0))`,
		}
	}
	if index {
		stmts = append(stmts, `CREATE INDEX orders_status_expire_at ON `+s.T("orders")+` (status, expire_at)`)
	}
	for _, q := range stmts {
		if _, err := s.DB.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// Source is the shop's orders table as a source: the guard closes an
// unpaid order at its deadline, the second statement releases its stock,
// locking the stock rows in SKU order (docs/sources.md's lock order).
func (s Shop) Source(name string) hourglass.Source {
	return hourglass.Source{
		Name: name, Table: s.T("orders"), Key: "id", Deadline: "expire_at", Pending: "status = 'UNPAID'",
		Close: []string{
			`UPDATE ` + s.T("orders") + ` SET status = 'CLOSED' WHERE id = :key AND status = 'UNPAID' AND expire_at <= ` + s.Now(),
			s.StockUpdate(":key", true),
		},
		Lock: []string{s.LockStock()},
	}
}

// LockStock is the source's lock statement of docs/sources.md: it locks
// the stock rows of the batch's closing orders in SKU order, as the shop's
// create and pay do, before their releases run. PostgreSQL locks a
// SELECT's rows after its ORDER BY; MySQL locks them as it reads them, so
// the SKUs are sorted first (a derived table whose LIMIT keeps its ORDER
// BY) and the stock rows read in that order (STRAIGHT_JOIN).
func (s Shop) LockStock() string {
	if s.Postgres {
		return `SELECT sku FROM ` + s.T("stock") + ` WHERE sku IN (SELECT sku FROM ` + s.T("order_items") +
			` WHERE order_id IN (:keys)) ORDER BY sku FOR NO KEY UPDATE`
	}
	return `SELECT s.sku FROM (SELECT DISTINCT sku FROM ` + s.T("order_items") + ` WHERE order_id IN (:keys) ORDER BY sku LIMIT 18446744073709551615) i STRAIGHT_JOIN ` +
		s.T("stock") + ` s ON s.sku = i.sku FOR UPDATE`
}

// PayStatement is the pay path's conditional update of docs/sources.md
// (placeholders as ?): it pays the order only while unpaid and before its
// deadline by the statement's clock.
func (s Shop) PayStatement() string {
	return `UPDATE ` + s.T("orders") + ` SET status = 'PAID' WHERE id = ? AND status = 'UNPAID' AND expire_at > ` + s.Now()
}

// StockUpdate is docs/sources.md's statement that moves an order's
// reserved stock, the order's id bound by key (":key" or a placeholder),
// locking the stock rows in SKU order: back to available (release, the
// close), or out as sold (the pay).
func (s Shop) StockUpdate(key string, release bool) string {
	stock, items := s.T("stock"), s.T("order_items")
	if s.Postgres {
		available := "s.available"
		if release {
			available += " + i.qty"
		}
		return `UPDATE ` + stock + ` s SET available = ` + available + `, reserved = s.reserved - i.qty FROM (SELECT st.sku, it.qty FROM ` + stock + ` st JOIN ` + items +
			` it ON it.sku = st.sku WHERE it.order_id = ` + key + ` ORDER BY st.sku FOR NO KEY UPDATE OF st) i WHERE s.sku = i.sku`
	}
	available := ""
	if release {
		available = "s.available = s.available + i.qty, "
	}
	return `UPDATE ` + items + ` i STRAIGHT_JOIN ` + stock + ` s ON s.sku = i.sku SET ` + available + `s.reserved = s.reserved - i.qty WHERE i.order_id = ` + key
}

// PutStock sets a SKU's stock.
func (s Shop) PutStock(t testing.TB, sku string, available int) {
	t.Helper()
	q := `INSERT INTO ` + s.T("stock") + ` (sku, available, reserved) VALUES (?, ?, 0)`
	if s.Postgres {
		q = `INSERT INTO ` + s.T("stock") + ` (sku, available, reserved) VALUES ($1, $2, 0)`
	}
	if _, err := s.DB.ExecContext(t.Context(), q, sku, available); err != nil {
		t.Fatal(err)
	}
}

// Order inserts an unpaid order due in (from the database's now) that
// reserves qty of sku, in one transaction, as an order service would, and
// returns its id.
func (s Shop) Order(t testing.TB, user string, in time.Duration, sku string, qty int) int64 {
	t.Helper()
	id, err := s.TryOrder(t, user, in, sku, qty)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TryOrder is Order returning its error (for goroutines).
func (s Shop) TryOrder(t testing.TB, user string, in time.Duration, sku string, qty int) (id int64, err error) {
	err = retryDeadlock(func() error {
		id, err = s.order(t.Context(), user, in, sku, qty)
		return err
	})
	return id, err
}

// order is one attempt of TryOrder.
func (s Shop) order(ctx context.Context, user string, in time.Duration, sku string, qty int) (int64, error) {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	ms := in.Milliseconds()
	var id int64
	if s.Postgres {
		err = tx.QueryRowContext(ctx, `INSERT INTO `+s.T("orders")+` (user_id, status, expire_at) VALUES ($1, 'UNPAID', `+s.Now()+` + $2 * interval '1 millisecond') RETURNING id`, user, ms).Scan(&id)
	} else {
		var res sql.Result
		res, err = tx.ExecContext(ctx, `INSERT INTO `+s.T("orders")+` (user_id, status, expire_at) VALUES (?, 'UNPAID', `+s.Now()+` + INTERVAL ? * 1000 MICROSECOND)`, user, ms)
		if err == nil {
			id, err = res.LastInsertId()
		}
	}
	if err != nil {
		return 0, fmt.Errorf("insert order: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.Bind(`INSERT INTO `+s.T("order_items")+` (order_id, sku, qty) VALUES (?, ?, ?)`), id, sku, qty); err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	n, err := exec(ctx, tx, s.Bind(`UPDATE `+s.T("stock")+` SET available = available - ?, reserved = reserved + ? WHERE sku = ? AND available >= ?`), qty, qty, sku, qty)
	if err != nil {
		return 0, fmt.Errorf("reserve stock: %w", err)
	}
	if n != 1 {
		return 0, fmt.Errorf("reserve stock: %d rows changed, want 1", n)
	}
	return id, tx.Commit()
}

// Pay pays an order the way the shop's pay path does, with its own
// conditional update: only while unpaid and before its deadline. It
// reports whether the pay won, and moves reserved stock to sold when it
// did.
//
// The pay is run again after a deadlock, as a shop's must be: a close
// batch locks several orders and their stock rows in one transaction, and
// InnoDB rolls back the transaction that changed fewer rows, which can be
// the pay.
func (s Shop) Pay(t testing.TB, id int64) (paid bool, err error) {
	err = retryDeadlock(func() error {
		paid, err = s.pay(t.Context(), id)
		return err
	})
	return paid, err
}

// retryDeadlock runs attempt until it returns no deadlock error, at most
// five times.
func retryDeadlock(attempt func() error) error {
	var err error
	for range 5 {
		if err = attempt(); !deadlock(err) {
			return err
		}
	}
	return err
}

// deadlock reports whether err is the database's deadlock: MySQL's error
// 1213, PostgreSQL's SQLSTATE 40P01.
func deadlock(err error) bool {
	var my *mysql.MySQLError
	var pg *pgconn.PgError
	return errors.As(err, &my) && my.Number == 1213 || errors.As(err, &pg) && pg.Code == "40P01"
}

// pay is one attempt of Pay.
func (s Shop) pay(ctx context.Context, id int64) (bool, error) {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	n, err := exec(ctx, tx, s.Bind(s.PayStatement()), id)
	if err != nil || n == 0 {
		return false, err
	}
	if _, err = tx.ExecContext(ctx, s.StockUpdate(s.Bind("?"), false), id); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// Status returns an order's status.
func (s Shop) Status(t testing.TB, id int64) string {
	t.Helper()
	var st string
	if err := s.DB.QueryRowContext(t.Context(), s.Bind(`SELECT status FROM `+s.T("orders")+` WHERE id = ?`), id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Stock returns a SKU's available and reserved stock.
func (s Shop) Stock(t testing.TB, sku string) (available, reserved int) {
	t.Helper()
	if err := s.DB.QueryRowContext(t.Context(), s.Bind(`SELECT available, reserved FROM `+s.T("stock")+` WHERE sku = ?`), sku).Scan(&available, &reserved); err != nil {
		t.Fatal(err)
	}
	return available, reserved
}

// Exec runs one statement of the shop's (placeholders as ?), again after a
// deadlock (see Pay).
func (s Shop) Exec(t testing.TB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	err := retryDeadlock(func() (err error) {
		n, err = exec(t.Context(), s.DB, s.Bind(q), args...)
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// Bind turns a statement's ? placeholders into the shop's database's
// (PostgreSQL's $n).
func (s Shop) Bind(q string) string {
	if !s.Postgres {
		return q
	}
	out := make([]byte, 0, len(q)+8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = fmt.Appendf(out, "$%d", n)
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

// exec runs q and returns the rows it changed.
func exec(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) (int64, error) {
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
