package sqlite

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/writer"
	"zombiezen.com/go/sqlite"
)

// The order, timer and delivery-attempt writes run the one algorithm of
// store/internal/batch (as MySQL's do), over txn: SQLite's statements on the
// writer's connection. One writer goroutine owns the file, so "lock" reads
// the row; each statement names one row by its key (a prepared statement
// SQLite caches, no round trip; a method looks it up once, before its loop
// over the keys, since the connection's cache hashes the whole text), and
// every write is OR FAIL: a failed constraint fails the whole batch anyway
// (then bisected), so a statement needs no statement journal of its own,
// whose 64 KiB chunk, too large for the allocator ballast (ballast.go), cost
// an mmap and a munmap each.

// submit queues o in its lane, weighted like a close when it is urgent,
// and waits for its result.
func (s *Store) submit(ctx context.Context, o *batch.Op) error {
	w := &op{b: o}
	if o.Lane() == writer.Urgent {
		w.orders = s.urgentWeight(len(o.IDs))
	}
	if err := s.w.Submit(ctx, o.Lane(), w); err != nil {
		return err
	}
	return o.Res.Err
}

// runBatch runs ops (a run of consecutive batch writes of the writer's
// batch) in the writer's open transaction and returns how many deliveries
// they created.
func (s *Store) runBatch(ctx context.Context, conn *sqlite.Conn, ops []*batch.Op) (batch.Outcome, error) {
	out, err := batch.Run(ctx, s.batchConfig(), &txn{s: s, conn: conn}, ops)
	if err != nil {
		return out, err
	}
	s.fannedOut(out.Deliveries, out.Fanned)
	return out, nil
}

// batchConfig is what the shared algorithm needs of the store.
func (s *Store) batchConfig() batch.Config {
	return batch.Config{Outbox: s.cfg.Outbox, DeferFanOut: func(closes int) bool { return fanout.Burst(s.w.Urgent(), closes) }}
}

// txn is batch.Tx on the writer's connection, inside its transaction.
type txn struct {
	s    *Store
	conn *sqlite.Conn
}

var _ batch.Tx = (*txn)(nil)

// exec steps a prepared write statement.
func exec(stmt *sqlite.Stmt, what string) error {
	if _, err := step(stmt, nil); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	return nil
}

func bindNullInt(stmt *sqlite.Stmt, i int, v int64) {
	if v == 0 {
		stmt.BindNull(i)
	} else {
		stmt.BindInt64(i, v)
	}
}

func bindNullText(stmt *sqlite.Stmt, i int, v string) {
	if v == "" {
		stmt.BindNull(i)
	} else {
		stmt.BindText(i, v)
	}
}

func bindNullTime(stmt *sqlite.Stmt, i int, t time.Time) {
	if t.IsZero() {
		stmt.BindNull(i)
	} else {
		stmt.BindInt64(i, hourglass.UnixMilli(t))
	}
}

func (t *txn) StoredKeys(_ context.Context, keys []string) (map[string]plan.StoredKey, error) {
	out := make(map[string]plan.StoredKey, len(keys))
	stmt := t.conn.Prep(`SELECT request_hash, order_id FROM idempotency_keys WHERE key = ?1`)
	for _, key := range keys {
		stmt.BindText(1, key)
		if _, err := step(stmt, func(st *sqlite.Stmt) {
			k := plan.StoredKey{Hash: make([]byte, st.ColumnLen(0)), OrderID: st.ColumnInt64(1)}
			st.ColumnBytes(0, k.Hash)
			out[key] = k
		}); err != nil {
			return nil, fmt.Errorf("sqlite: read idempotency keys: %w", err)
		}
	}
	return out, nil
}

func (t *txn) LockOrders(_ context.Context, ids []int64) ([]hourglass.Order, error) {
	out := make([]hourglass.Order, 0, len(ids))
	stmt := t.conn.Prep(`SELECT ` + orderColumns + `, ` + stored.ReminderColumns + ` FROM orders WHERE id = ?1`)
	for _, id := range ids {
		stmt.BindInt64(1, id)
		var scanErr error
		if _, err := step(stmt, func(st *sqlite.Stmt) {
			var o hourglass.Order
			o, scanErr = scanOrder(st)
			scanReminder(st, 10, &o)
			out = append(out, o)
		}); err != nil {
			return nil, fmt.Errorf("sqlite: read orders: %w", err)
		}
		if scanErr != nil {
			return nil, scanErr
		}
	}
	return out, nil
}

func (t *txn) LockProducts(_ context.Context, skus []string) (plan.Stock, error) {
	stock := make(plan.Stock, len(skus))
	stmt := t.conn.Prep(`SELECT category, available, reserved, sold FROM products WHERE sku = ?1`)
	for _, sku := range skus {
		stmt.BindText(1, sku)
		if _, err := step(stmt, func(st *sqlite.Stmt) {
			stock[sku] = &plan.Product{Category: st.ColumnText(0), Available: st.ColumnInt64(1), Reserved: st.ColumnInt64(2), Sold: st.ColumnInt64(3)}
		}); err != nil {
			return nil, fmt.Errorf("sqlite: read product %q: %w", sku, err)
		}
	}
	return stock, nil
}

// lockTimer reads the timer stmt selects (timerColumns, request_hash), if
// any, into out.
func lockTimer(stmt *sqlite.Stmt, out []*batch.Timer) ([]*batch.Timer, error) {
	_, err := step(stmt, func(st *sqlite.Stmt) {
		bt := &batch.Timer{T: scanTimer(st), Hash: make([]byte, st.ColumnLen(9))}
		st.ColumnBytes(9, bt.Hash)
		out = append(out, bt)
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: read timers: %w", err)
	}
	return out, nil
}

func (t *txn) LockTimerKeys(_ context.Context, keys []string) (out []*batch.Timer, err error) {
	stmt := t.conn.Prep(`SELECT ` + timerColumns + `, request_hash FROM timers WHERE key = ?1`)
	for _, key := range keys {
		stmt.BindText(1, key)
		if out, err = lockTimer(stmt, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t *txn) LockTimerIDs(_ context.Context, ids []int64) (out []*batch.Timer, err error) {
	stmt := t.conn.Prep(`SELECT ` + timerColumns + `, request_hash FROM timers WHERE id = ?1 AND status = 'scheduled'`)
	for _, id := range ids {
		stmt.BindInt64(1, id)
		if out, err = lockTimer(stmt, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t *txn) Webhooks(_ context.Context, ids []int64) (map[int64]bool, error) {
	out := make(map[int64]bool, len(ids))
	stmt := t.conn.Prep(`SELECT 1 FROM webhooks WHERE id = ?1`)
	for _, id := range ids {
		stmt.BindInt64(1, id)
		found, err := step(stmt, nil)
		if err != nil {
			return nil, fmt.Errorf("sqlite: look up webhook %d: %w", id, err)
		}
		out[id] = found
	}
	return out, nil
}

// LockWebhooks: the one writer holds the file, so a delete cannot race.
func (t *txn) LockWebhooks(ctx context.Context, ids []int64) (map[int64]bool, error) {
	return t.Webhooks(ctx, ids)
}

func (t *txn) Snapshot(context.Context) (batch.Snapshot, error) {
	return batch.Snapshot{
		Now:        hourglass.FromUnixMilli(hourglass.UnixMilli(t.s.clock.Now())),
		Policy:     func() (hourglass.Policy, error) { return t.s.loadPolicy(t.conn) },
		Subscribed: t.s.webhookCount(t.conn) > 0,
	}, nil
}

// InsertOrders writes the orders with one multi-row INSERT per chunk of up
// to maxRows rows (insertRows), giving them the ids SQLite would, one above the
// largest, explicitly: one statement's cursors stay open across its rows,
// so each index insert appends from where the last one ended instead of
// each statement opening five cursors and seeking from the root
// (docs/benchmarks/sqlite-create.md).
func (t *txn) InsertOrders(_ context.Context, orders []batch.NewOrder, now time.Time) error {
	return t.insertRows(&t.s.orderRows, len(orders), func(stmt *sqlite.Stmt, p, i int, id int64) {
		o := &orders[i].Order
		o.ID = id
		stmt.BindInt64(p+1, id)
		stmt.BindText(p+2, o.UserID)
		stmt.BindText(p+3, orders[i].Items)
		stmt.BindInt64(p+4, hourglass.UnixMilli(now))
		stmt.BindInt64(p+5, hourglass.UnixMilli(o.Deadline))
		bindNullTime(stmt, p+6, o.RemindAt)
		stmt.BindInt64(p+7, o.RemindBefore.Milliseconds())
	})
}

// orderRows is InsertOrders' multi-row INSERT.
func orderRows() rowsInsert {
	return newRowsInsert("orders", `SELECT max(id) FROM orders`,
		`INSERT OR FAIL INTO orders (id, user_id, status, items, created_at, deadline, remind_at, remind_before_ms) VALUES `,
		`(?, ?, 'pending_payment', ?, ?, ?, ?, ?)`, 7)
}

// rowsInsert is one table's multi-row INSERT (insertRows): its text for
// each chunk size (chunkSizes), built once per store, so that a batch
// does not build the text of each chunk again only for the connection's
// statement cache to look it up.
type rowsInsert struct {
	table    string
	maxQuery string // the largest key so far (a max)
	cols     int    // parameters per row
	sql      [len(chunkSizes)]string
}

// chunkSizes are the sizes of a multi-row INSERT, largest first, down to 1.
var chunkSizes = [...]int{maxRows, 16, 4, 1}

// newRowsInsert is the INSERT of rows of cols parameters each into table:
// insert followed by row, comma-separated, once per row of a chunk.
func newRowsInsert(table, maxQuery, insert, row string, cols int) rowsInsert {
	r := rowsInsert{table: table, maxQuery: maxQuery, cols: cols}
	for i, n := range chunkSizes {
		r.sql[i] = valuesSQL(insert, row, n)
	}
	return r
}

// insertRows inserts rows rows into ins's table, with one insert…VALUES
// row, row, … per chunk (chunk), the first row's key one above the
// largest ins.maxQuery reads and the others following it. bind binds row i
// (its key id) from parameter p+1.
func (t *txn) insertRows(ins *rowsInsert, rows int, bind func(stmt *sqlite.Stmt, p, i int, id int64)) error {
	next, err := t.nextRowID(ins.maxQuery, rows)
	if err != nil {
		return err
	}
	for done := 0; done < rows; {
		c := chunk(rows - done)
		n := chunkSizes[c]
		stmt := t.conn.Prep(ins.sql[c])
		for k := range n {
			bind(stmt, k*ins.cols, done+k, next+int64(k))
		}
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: insert %d %s from %d: %w", n, ins.table, next, err)
		}
		next += int64(n)
		done += n
	}
	return nil
}

// maxRows bounds a multi-row INSERT: with the smaller chunks (chunkSizes) a
// table has four statement shapes in the connection's cache.
const maxRows = 64

// chunk is the index in chunkSizes of the next multi-row INSERT's size for
// n rows left (n ≥ 1): the largest that n fills.
func chunk(n int) int {
	i := 0
	for chunkSizes[i] > n {
		i++
	}
	return i
}

// valuesSQL is insert followed by n copies of row, comma-separated.
func valuesSQL(insert, row string, n int) string {
	var b strings.Builder
	b.Grow(len(insert) + n*(len(row)+2))
	b.WriteString(insert)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// nextRowID is one above the largest rowid query (a max) reads, as SQLite
// would assign it, or an error when fewer than rows ids are left above it.
func (t *txn) nextRowID(query string, rows int) (int64, error) {
	var last int64
	if _, err := step(t.conn.Prep(query), func(st *sqlite.Stmt) { last = st.ColumnInt64(0) }); err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", query, err)
	}
	if last > math.MaxInt64-int64(rows) {
		return 0, fmt.Errorf("sqlite: %s: no id left above %d", query, last)
	}
	return last + 1, nil
}

// UpdateOrders writes the orders that take the same values (a batch's
// closes: status, closed_at and reason alike) with one statement per run of
// them, by ids; the rest one statement each. One UPDATE per closing order
// cost a close burst a fifth of its throughput against the one set-based
// statement (docs/benchmarks/store-restructure.md). NOT INDEXED: the ids
// reach rows by the primary key, not by the (status, ...) indexes, which in a
// burst hold every order due at this instant.
func (t *txn) UpdateOrders(_ context.Context, orders []*hourglass.Order) error {
	for len(orders) > 0 {
		n := 1
		for n < len(orders) && sameUpdate(orders[0], orders[n]) {
			n++
		}
		o := orders[0]
		var stmt *sqlite.Stmt
		if n == 1 {
			// A pay (its own payment_id) or a lone close: by the key, without
			// the IN list's JSON and ephemeral table.
			stmt = t.conn.Prep(`UPDATE OR FAIL orders SET status = ?2, paid_at = ?3, closed_at = ?4, close_reason = ?5, payment_id = ?6 WHERE id = ?1`)
			stmt.BindInt64(1, o.ID)
		} else {
			stmt = t.conn.Prep(`UPDATE OR FAIL orders NOT INDEXED SET status = ?2, paid_at = ?3, closed_at = ?4, close_reason = ?5, payment_id = ?6
WHERE id IN (SELECT value FROM json_each(?1))`)
			ids := make([]int64, n)
			for k := range n {
				ids[k] = orders[k].ID
			}
			stmt.BindText(1, idList(ids))
		}
		stmt.BindText(2, string(o.Status))
		bindNullTime(stmt, 3, o.PaidAt)
		bindNullTime(stmt, 4, o.ClosedAt)
		bindNullText(stmt, 5, o.CloseReason)
		bindNullText(stmt, 6, o.PaymentID)
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: update %d orders from %d: %w", n, o.ID, err)
		}
		orders = orders[n:]
	}
	return nil
}

// sameUpdate reports whether UpdateOrders writes the same values to a and b.
func sameUpdate(a, b *hourglass.Order) bool {
	return a.Status == b.Status && a.PaidAt.Equal(b.PaidAt) && a.ClosedAt.Equal(b.ClosedAt) &&
		a.CloseReason == b.CloseReason && a.PaymentID == b.PaymentID
}

// idList is ids as a JSON array, for json_each.
func idList(ids []int64) string {
	b := make([]byte, 0, 2+len(ids)*20)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

func (t *txn) ExtendOrder(_ context.Context, id int64, deadline time.Time) error {
	stmt := t.conn.Prep(`UPDATE OR FAIL orders SET deadline = ?2 WHERE id = ?1`)
	stmt.BindInt64(1, id)
	stmt.BindInt64(2, hourglass.UnixMilli(deadline))
	return exec(stmt, fmt.Sprintf("extend order %d", id))
}

// UpdateProducts writes each changed product once, in SKU order.
func (t *txn) UpdateProducts(_ context.Context, stock plan.Stock) error {
	stmt := t.conn.Prep(`UPDATE OR FAIL products SET available = available + ?2, reserved = reserved + ?3, sold = sold + ?4 WHERE sku = ?1`)
	for _, sku := range stock.Changed() {
		d := stock[sku].Delta
		stmt.BindText(1, sku)
		stmt.BindInt64(2, d[plan.Available])
		stmt.BindInt64(3, d[plan.Reserved])
		stmt.BindInt64(4, d[plan.Sold])
		if err := exec(stmt, fmt.Sprintf("update product %q", sku)); err != nil {
			return err
		}
	}
	return nil
}

// bindTimer binds ?2 status, ?3 fire_at, ?4 fired_at, ?5 payload, ?6
// webhook_id, ?7 request_hash, ?8 updated_at.
func bindTimer(stmt *sqlite.Stmt, bt *batch.Timer) {
	tm := bt.T
	stmt.BindText(2, string(tm.Status))
	stmt.BindInt64(3, hourglass.UnixMilli(tm.FireAt))
	bindNullTime(stmt, 4, tm.FiredAt)
	if tm.Payload == nil {
		stmt.BindNull(5)
	} else {
		stmt.BindText(5, string(tm.Payload))
	}
	bindNullInt(stmt, 6, tm.WebhookID)
	stmt.BindBytes(7, bt.Hash)
	stmt.BindInt64(8, hourglass.UnixMilli(tm.UpdatedAt))
}

// InsertTimers gives each timer the next id above every timer's, from
// hourglass.TimerIDBase.
func (t *txn) InsertTimers(_ context.Context, timers []*batch.Timer) error {
	stmt := t.conn.Prep(`INSERT OR FAIL INTO timers (id, key, status, fire_at, fired_at, payload, webhook_id, request_hash, updated_at, created_at)
VALUES ((SELECT coalesce(max(id), ?9 - 1) + 1 FROM timers), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?10)`)
	for _, bt := range timers {
		stmt.BindText(1, bt.T.Key)
		bindTimer(stmt, bt)
		stmt.BindInt64(9, hourglass.TimerIDBase)
		stmt.BindInt64(10, hourglass.UnixMilli(bt.T.CreatedAt))
		if err := exec(stmt, fmt.Sprintf("insert timer %q", bt.T.Key)); err != nil {
			return err
		}
		bt.T.ID = t.conn.LastInsertRowID()
	}
	return nil
}

func (t *txn) RearmTimers(_ context.Context, timers []*batch.Timer) error {
	stmt := t.conn.Prep(`UPDATE OR FAIL timers SET status = ?2, fire_at = ?3, fired_at = ?4, payload = ?5, webhook_id = ?6, request_hash = ?7, updated_at = ?8
WHERE id = ?1`)
	for _, bt := range timers {
		stmt.BindInt64(1, bt.T.ID)
		bindTimer(stmt, bt)
		if err := exec(stmt, fmt.Sprintf("re-arm timer %q", bt.T.Key)); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) SetTimers(_ context.Context, status hourglass.TimerStatus, ids []int64, now time.Time) error {
	query := `UPDATE OR FAIL timers SET status = 'cancelled', updated_at = ?2 WHERE id = ?1`
	if status == hourglass.TimerFired {
		query = `UPDATE OR FAIL timers SET status = 'fired', fired_at = ?2, updated_at = ?2 WHERE id = ?1`
	}
	stmt := t.conn.Prep(query)
	for _, id := range ids {
		stmt.BindInt64(1, id)
		stmt.BindInt64(2, hourglass.UnixMilli(now))
		if err := exec(stmt, fmt.Sprintf("set timer %d %s", id, status)); err != nil {
			return err
		}
	}
	return nil
}

// InsertEvents writes the events as InsertOrders writes orders: a
// multi-row INSERT per chunk, seqs given one above the largest. A column
// an event has not (body; cause and node but on a close or fire) is
// written NULL, as omitting it did.
func (t *txn) InsertEvents(_ context.Context, events []*batch.Event, now time.Time) error {
	return t.insertRows(&t.s.eventRows, len(events), func(stmt *sqlite.Stmt, p, i int, seq int64) {
		e := events[i]
		e.Seq = seq
		stmt.BindInt64(p+1, seq)
		stmt.BindText(p+2, e.ID)
		stmt.BindText(p+3, string(e.Type))
		stmt.BindInt64(p+4, e.Subject)
		stmt.BindInt64(p+5, hourglass.UnixMilli(now))
		switch {
		case e.By.Cause != "": // a close's or fire's provenance
			bindNullText(stmt, p+6, string(e.Body))
			stmt.BindText(p+7, string(e.By.Cause))
			bindNullText(stmt, p+8, e.By.Node)
		case e.Body != nil:
			stmt.BindText(p+6, string(e.Body))
			stmt.BindNull(p + 7)
			stmt.BindNull(p + 8)
		default:
			stmt.BindNull(p + 6)
			stmt.BindNull(p + 7)
			stmt.BindNull(p + 8)
		}
	})
}

// eventRows is InsertEvents' multi-row INSERT.
func eventRows() rowsInsert {
	return newRowsInsert("events", `SELECT max(seq) FROM events`,
		`INSERT OR FAIL INTO events (seq, id, type, order_id, created_at, body, cause, node) VALUES `,
		`(?, ?, ?, ?, ?, ?, ?, ?)`, 8)
}

// runs splits seqs (ascending) into runs of consecutive seqs, [first, last]
// each: the one writer gives a batch's events consecutive seqs, so a run is
// usually all of them.
func runs(seqs []int64) [][2]int64 {
	var out [][2]int64
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j] == seqs[j-1]+1 {
			j++
		}
		out = append(out, [2]int64{seqs[i], seqs[j-1]})
		i = j
	}
	return out
}

// DeferFanOut writes one fanout_pending row per run of consecutive seqs:
// its events are all order.closed (the only events deferred).
func (t *txn) DeferFanOut(_ context.Context, events []*batch.Event) error {
	seqs := batch.Seqs(events)
	for _, r := range runs(seqs) {
		stmt := t.conn.Prep(`INSERT OR FAIL INTO fanout_pending (first_seq, last_seq, type) VALUES (?1, ?2, ?3)`)
		stmt.BindInt64(1, r[0])
		stmt.BindInt64(2, r[1])
		stmt.BindText(3, string(hourglass.EventOrderClosed))
		if err := exec(stmt, fmt.Sprintf("defer the fan-out of events %d..%d", r[0], r[1])); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) InsertDeliveries(_ context.Context, events []*batch.Event, now time.Time) error {
	stmt := t.conn.Prep(`INSERT OR FAIL INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
VALUES (?1, ?2, ?3, 'pending', 0, ?4)`)
	for _, e := range events {
		stmt.BindInt64(1, e.WebhookID)
		stmt.BindInt64(2, e.Seq)
		stmt.BindInt64(3, e.Subject)
		stmt.BindInt64(4, hourglass.UnixMilli(now))
		if err := exec(stmt, fmt.Sprintf("deliver %s event of %d to webhook %d", e.Type, e.Subject, e.WebhookID)); err != nil {
			return err
		}
	}
	return nil
}

// FanOut runs two statements per run of consecutive seqs: the webhooks
// subscribed to each event's type, then those subscribed to "*" (a webhook
// subscribes to "*" alone or to distinct types, so each matches once;
// DISTINCT, ORDER BY or IN would cost a temporary table per statement).
func (t *txn) FanOut(_ context.Context, events []*batch.Event, now time.Time) (int, error) {
	seqs := batch.Seqs(events)
	fanned := 0
	for _, r := range runs(seqs) {
		for _, query := range [...]string{
			`INSERT OR FAIL INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT w.webhook_id, e.seq, e.order_id, 'pending', 0, ?3 FROM events e, webhook_subscriptions w WHERE e.seq BETWEEN ?1 AND ?2 AND w.type = e.type`,
			`INSERT OR FAIL INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT w.webhook_id, e.seq, e.order_id, 'pending', 0, ?3 FROM events e, webhook_subscriptions w WHERE e.seq BETWEEN ?1 AND ?2 AND w.type = '*'`,
		} {
			stmt := t.conn.Prep(query)
			stmt.BindInt64(1, r[0])
			stmt.BindInt64(2, r[1])
			stmt.BindInt64(3, hourglass.UnixMilli(now))
			if err := exec(stmt, fmt.Sprintf("fan out events %d..%d", r[0], r[1])); err != nil {
				return 0, err
			}
			fanned += t.conn.Changes()
		}
	}
	return fanned, nil
}

func (t *txn) LockDeliveries(_ context.Context, ids []int64) ([]*batch.Delivery, error) {
	var out []*batch.Delivery
	stmt := t.conn.Prep(`SELECT attempts, next_attempt_at FROM webhook_deliveries WHERE id = ?1 AND state = 'pending'`)
	for _, id := range ids {
		stmt.BindInt64(1, id)
		if _, err := step(stmt, func(st *sqlite.Stmt) {
			out = append(out, &batch.Delivery{ID: id, Attempts: int(st.ColumnInt64(0)), NextAt: hourglass.FromUnixMilli(st.ColumnInt64(1))})
		}); err != nil {
			return nil, fmt.Errorf("sqlite: read deliveries: %w", err)
		}
	}
	return out, nil
}

func (t *txn) UpdateDelivery(_ context.Context, d *batch.Delivery, now time.Time) error {
	stmt := t.conn.Prep(`UPDATE OR FAIL webhook_deliveries SET attempts = ?2, last_error = ?3, next_attempt_at = ?4 WHERE id = ?1`)
	at := d.NextAt
	if d.Dead {
		stmt = t.conn.Prep(`UPDATE OR FAIL webhook_deliveries SET state = 'dead', attempts = ?2, last_error = ?3, failed_at = ?4 WHERE id = ?1`)
		at = now
	}
	stmt.BindInt64(1, d.ID)
	stmt.BindInt64(2, int64(d.Attempts))
	stmt.BindText(3, d.LastError)
	stmt.BindInt64(4, hourglass.UnixMilli(at))
	return exec(stmt, fmt.Sprintf("record attempt of delivery %d", d.ID))
}

func (t *txn) DeleteDeliveries(_ context.Context, ids []int64) error {
	stmt := t.conn.Prep(`DELETE FROM webhook_deliveries WHERE id = ?1`)
	for _, id := range ids {
		stmt.BindInt64(1, id)
		if err := exec(stmt, fmt.Sprintf("delete delivery %d", id)); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) StreamHeads(_ context.Context, streams []batch.Stream) (map[batch.Stream]hourglass.DeliveryTimer, error) {
	out := make(map[batch.Stream]hourglass.DeliveryTimer, len(streams))
	for _, st := range streams {
		next, found, err := nextDelivery(t.conn, st.Webhook, st.Order)
		if err != nil {
			return nil, err
		}
		if found {
			out[st] = next
		}
	}
	return out, nil
}

func (t *txn) InsertOutbox(_ context.Context, due []hourglass.DueItem) error {
	stmt := t.conn.Prep(`INSERT OR FAIL INTO timer_outbox (order_id, deadline) VALUES (?1, ?2)
ON CONFLICT (order_id) DO UPDATE SET deadline = excluded.deadline`)
	for _, d := range due {
		stmt.BindInt64(1, d.ID)
		stmt.BindInt64(2, hourglass.UnixMilli(d.At))
		if err := exec(stmt, fmt.Sprintf("write outbox timer of %d", d.ID)); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) InsertKeys(_ context.Context, keys []batch.IdempotencyKey, now time.Time) error {
	stmt := t.conn.Prep(`INSERT OR FAIL INTO idempotency_keys (key, request_hash, order_id, created_at) VALUES (?1, ?2, ?3, ?4)`)
	for _, k := range keys {
		stmt.BindText(1, k.Key)
		stmt.BindBytes(2, k.Hash)
		stmt.BindInt64(3, k.OrderID)
		stmt.BindInt64(4, hourglass.UnixMilli(now))
		if err := exec(stmt, "insert idempotency key"); err != nil {
			return err
		}
	}
	return nil
}

// Announce: a SQLite database has one process, whose due feed the writer
// feeds.
func (t *txn) Announce(context.Context, time.Time, []hourglass.DueItem) error { return nil }
