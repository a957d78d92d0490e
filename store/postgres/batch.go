package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/jackc/pgx/v5"
)

// Group commit of order, timer and delivery-attempt writes: the writer
// (store/internal/writer) hands a batch of ops to dialect.Run, which runs
// the one algorithm of store/internal/batch in one transaction over txn,
// PostgreSQL's statements. Locks are SELECT … ORDER BY key FOR UPDATE under
// READ COMMITTED; now is clock_timestamp() read after them.
//
// A statement that returns nothing is not sent on its own: txn queues it
// and sends it in one pipeline (pgx.Batch) with the next statement whose
// answer the algorithm needs, or with the COMMIT, joined with the other
// queued writes into one statement where one statement can hold them
// (combine.go); now, the policy, the subscriptions and a batch's new order
// ids are read at the end of each lock's pipeline, so Snapshot costs no
// round trip. A batch of a few payments or closes is two round trips
// (BEGIN, the orders' locks, the products' locks and now; the writes and
// COMMIT), a batch of creates two (BEGIN, the products' locks, now and the
// order ids; one statement of writes and COMMIT); a batch of more than
// prelockOrders orders locks its products in a round trip of their own.
// Creating timers, idempotency keys, pinned webhooks and delivery attempts
// add a round trip each. PostgreSQL's own statements, beyond one a method:
// LockOrders also locks the products of a few orders, and the events are
// one statement with their deliveries (eventsSQL). What is left for one
// round trip per batch: the timers' locks and ids, the keys' reads and the
// attempts' reads in the lock pipeline.
//
// A key array is read through a sub-select, "id = ANY((SELECT
// $1::bigint[])::bigint[])", wherever a batch's array is often short. pgx
// prepares each statement once a connection, and PostgreSQL keeps the
// generic plan only when it costs no more than the custom ones; a generic
// plan counts 10 elements in a parameter array, a custom one the real
// number, so for batches of fewer than 10 keys the custom plan always
// looked cheaper and the statement was planned again at every execution
// (the orders' lock: 200 custom plans in 200 batches, 48 against 111 µs of
// bind; docs/benchmarks/postgres-speed.md). Through the sub-select neither
// plan can count the elements, both are the same index look-ups, and the
// generic one is kept.

// submit queues o in its lane and waits for its result. Once queued, an
// op runs even if its ctx ends while it waits, unless its batch has not
// begun when ctx ends: then it is skipped and ctx.Err() returned.
func (s *Store) submit(ctx context.Context, o *batch.Op) error {
	if err := s.w.Submit(ctx, o.Lane(), o); err != nil {
		return err
	}
	return o.Res.Err
}

// retryPolicy is PostgreSQL's: a serialization failure or a deadlock rolls
// the transaction back, and it runs again at once, at most 5 attempts in
// all. Locks are taken in one order, so a retry is rare and meets a
// different interleaving; a batch gives up after writeTimeout.
func retryPolicy() writer.RetryPolicy {
	return writer.RetryPolicy{Attempts: 5, Timeout: writeTimeout}
}

// dialect is the store as the group-commit writer sees it.
type dialect struct{ *Store }

// batchConfig is what the shared algorithm needs of the store.
func (s *Store) batchConfig() batch.Config {
	return batch.Config{Outbox: s.cfg.Outbox, DeferFanOut: func(closes int) bool { return fanout.Burst(s.w.Urgent(), closes) }}
}

// Run runs ops in one transaction on a pooled connection. It returns the
// number of deliveries created. An error means nothing committed, unless it
// is marked writer.OutcomeUnknown or a lost connection.
func (d dialect) Run(ctx context.Context, ops []*batch.Op) (int, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	conn := c.Conn()
	n, err := d.runTx(ctx, conn, ops)
	if err != nil && !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
		if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
			conn.Close(ctx) // the pool drops it
		}
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: write orders: %w", err)
	}
	return n, nil
}

// Classify implements writer.Dialect.
func (dialect) Classify(err error) writer.Class { return classify(err) }

func (s *Store) runTx(ctx context.Context, conn *pgx.Conn, ops []*batch.Op) (int, error) {
	t := &txn{s: s, q: conn, begin: true, mayHold: true}
	for _, o := range ops {
		if o.Kind == batch.Create {
			t.creates++
			for _, it := range o.Create.Items {
				t.skus = append(t.skus, it.SKU)
			}
		}
	}
	slices.Sort(t.skus)
	t.skus = slices.Compact(t.skus)
	out, err := batch.Run(ctx, s.batchConfig(), t, ops)
	if err != nil {
		return 0, err
	}
	if err := t.send(ctx, false, stmt{name: "commit", sql: "COMMIT"}); err != nil {
		if pgCode(err) != "" {
			return 0, err // the server refused a statement: rolled back
		}
		// It may have committed: the next cluster read sends or drops
		// what it held, as for a commit.
		s.quiet.unsent(t.held)
		return 0, writer.OutcomeUnknown(err)
	}
	if len(t.held) > 0 {
		s.notifyLate(ctx, conn, s.quiet.committed(t.held))
	}
	if out.Deferred {
		s.fanOut.Wake()
	}
	return out.Deliveries + t.fanned, nil
}

// sender is a connection or a transaction: where txn sends its pipelines.
type sender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// stmt is one statement of a pipeline; read reads its answer (nil: none).
type stmt struct {
	name string
	sql  string
	args []any
	read func(br pgx.BatchResults) error
	// target is the table a queued write changes: combine may join it
	// with its neighbours (combine.go), by kind. "": it runs alone.
	target string
	kind   writeKind
	// with and cols: a statement "WITH with SELECT cols" that answers
	// counts, which answer takes; combine joins its CTEs.
	with   string
	cols   []string
	answer func(counts []int64)
}

// txn is batch.Tx on one PostgreSQL transaction. Not safe for concurrent
// use.
type txn struct {
	s     *Store
	q     sender
	begin bool // BEGIN goes with the first pipeline (false: q is a transaction)
	// creates is how many order ids the first snapshot draws (the
	// batch's creates).
	creates int
	ids     []int64
	// skus are the SKUs the batch's creates name, sorted: LockOrders locks
	// them with the products of the pending orders it locked (locked).
	skus   []string
	locked plan.Stock
	asked  map[string]bool // the SKUs whose products locked holds, if they exist
	queued []stmt          // statements that return nothing, not yet sent
	snap   *batch.Snapshot // read after the latest lock, if any
	// events are InsertEvents', sent with their deliveries (eventsSQL) in
	// the next pipeline but LockWebhooks'; mode is each one's fan-out.
	events []*batch.Event
	mode   map[*batch.Event]string
	at     time.Time
	sent   bool // the events' statement was sent
	fanned int  // deliveries eventsSQL created for subscriptions
	// mayHold: the announcement may be held while the node is alone
	// (quiet.go), by a transaction that knows when it committed; held
	// are the payloads it held.
	mayHold bool
	held    []string
}

var _ batch.Tx = (*txn)(nil)

// queue queues a statement that returns nothing.
func (t *txn) queue(name, sql string, args ...any) {
	target, kind := writeTarget(sql)
	t.queued = append(t.queued, stmt{name: name, sql: sql, args: args, target: target, kind: kind})
}

// send sends, in one pipeline, BEGIN (first pipeline only), the queued
// statements and the events' statement (unless holdEvents), joined where
// they can be (combine), and last, reads; it returns the first statement's
// error, named.
func (t *txn) send(ctx context.Context, holdEvents bool, reads ...stmt) error {
	var all []stmt
	if t.begin {
		t.begin = false
		all = append(all, stmt{name: "begin", sql: "BEGIN"})
	}
	writes := t.queued
	t.queued = nil
	if len(t.events) > 0 && !t.sent && !holdEvents {
		t.sent = true
		writes = append(writes, t.eventsStmt())
	}
	all = append(all, combine(writes)...)
	all = append(all, reads...)
	b := &pgx.Batch{}
	for _, st := range all {
		b.Queue(st.sql, st.args...)
	}
	br := t.q.SendBatch(ctx, b)
	for _, st := range all {
		var err error
		if st.read != nil {
			err = st.read(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	return br.Close()
}

// flush sends what is queued (at the end of a transaction the caller
// commits).
func (t *txn) flush(ctx context.Context) error {
	if len(t.queued) == 0 && (len(t.events) == 0 || t.sent) {
		return nil
	}
	return t.send(ctx, false)
}

// lockRead sends read with the queued statements and, after it, the
// snapshot: the last lock's pipeline has read now after every lock, so
// Snapshot needs no round trip of its own.
func (t *txn) lockRead(ctx context.Context, read stmt) error {
	t.snap = nil
	return t.send(ctx, false, read, t.snapshotStmt())
}

// query is a read of rows, each scanned by scan.
func query(name, sql string, args []any, dest []any, scan func() error) stmt {
	return stmt{name: name, sql: sql, args: args, read: func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, dest, scan)
		return err
	}}
}

// snapshotSQL reads now (after the locks), the policy and whether any
// webhook subscription exists; snapshotIDsSQL also draws $3 order ids
// from the sequence $2, for the batch's creates (those refused leave gaps,
// as a rolled back insert does), once per batch; $3 is read through a
// sub-select, so that its plan is made once (see productsLockSQL).
const (
	snapshotSQL = `SELECT COALESCE($1::bigint, ` + dbNow + `), (SELECT value FROM settings WHERE name = 'policy'),
	EXISTS (SELECT 1 FROM webhook_subscriptions)`
	snapshotIDsSQL = snapshotSQL + `, ARRAY(SELECT nextval($2::regclass) FROM generate_series(1, (SELECT $3::int)))`
	// snapshotIDSQL draws the one id of a batch of one create (the
	// batches of a quiet node) without the series and its sub-plans: 5
	// µs less a batch.
	snapshotIDSQL = snapshotSQL + `, ARRAY[nextval($2::regclass)]`
)

func (t *txn) snapshotStmt() stmt {
	sql, args := snapshotSQL, []any{t.s.nowArg()}
	draw := t.creates > 0 && t.ids == nil
	switch {
	case draw && t.creates == 1:
		sql, args = snapshotIDSQL, append(args, t.s.orderSeq)
	case draw:
		sql, args = snapshotIDsSQL, append(args, t.s.orderSeq, t.creates)
	}
	return stmt{name: "read now and policy", sql: sql, args: args, read: func(br pgx.BatchResults) error {
		var (
			nowMs      int64
			policy     *string
			subscribed bool
			ids        []int64
		)
		dest := []any{&nowMs, &policy, &subscribed}
		if draw {
			dest = append(dest, &ids)
		}
		if err := br.QueryRow().Scan(dest...); err != nil {
			return err
		}
		if draw {
			t.ids = ids
		}
		raw := ""
		if policy != nil {
			raw = *policy
		}
		t.snap = &batch.Snapshot{Now: hourglass.FromUnixMilli(nowMs), Subscribed: subscribed,
			Policy: func() (hourglass.Policy, error) { return t.s.policy.Decode(raw) }}
		return nil
	}}
}

func (t *txn) Snapshot(ctx context.Context) (batch.Snapshot, error) {
	if t.snap == nil {
		if err := t.send(ctx, false, t.snapshotStmt()); err != nil {
			return batch.Snapshot{}, err
		}
	}
	return *t.snap, nil
}

// Advisory lock classes: the first key of pg_advisory_xact_lock.
const (
	idemLockClass  int32 = 0x68676b31 // "hgk1": idempotency keys
	timerLockClass int32 = 0x68676b33 // "hgk3": timer keys
)

// keyLockSQL takes the transaction advisory locks of keys ($2) of class
// $1, in hash order. A row lock cannot lock a key that has no row yet, and
// PostgreSQL, unlike InnoDB, does not retry the duplicate key of a racing
// insert: every process takes a key's lock before reading its row (in the
// next statement, whose snapshot is taken once the lock is held) and holds
// it until its insert committed, so the read sees the winner of any race.
const keyLockSQL = `SELECT pg_advisory_xact_lock($1::int, h) FROM
(SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY 1) AS x`

func (t *txn) StoredKeys(ctx context.Context, keys []string) (map[string]plan.StoredKey, error) {
	stored := map[string]plan.StoredKey{}
	t.queue("lock idempotency keys", keyLockSQL, idemLockClass, keys)
	var (
		key string
		k   plan.StoredKey
	)
	err := t.lockRead(ctx, query("read idempotency keys", `SELECT key, request_hash, order_id FROM idempotency_keys WHERE key = ANY((SELECT $1::text[])::text[])`,
		[]any{keys}, []any{&key, &k.Hash, &k.OrderID}, func() error {
			stored[key] = plan.StoredKey{Hash: k.Hash, OrderID: k.OrderID}
			return nil
		}))
	return stored, err
}

// LockOrders locks the orders and, when they are at most prelockOrders,
// in the same pipeline the products the batch will ask LockProducts for
// (of the pending orders among them and of the creates:
// pendingProductsLockSQL), in SKU order: the lock phase of a batch of a few
// payments or closes is one round trip.
func (t *txn) LockOrders(ctx context.Context, ids []int64) ([]hourglass.Order, error) {
	var out []hourglass.Order
	reads := []stmt{{name: "lock orders", sql: `SELECT ` + orderColumns + `, o.remind_at, o.remind_before_ms FROM orders o WHERE o.id = ANY((SELECT $1::bigint[])::bigint[]) ORDER BY o.id FOR UPDATE`,
		args: []any{ids}, read: func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.Order, error) { return scanLockedOrder(row) })
			return err
		}}}
	var stock plan.Stock
	if len(ids) <= prelockOrders {
		stock = plan.Stock{}
		reads = append(reads, t.lockProducts(pendingProductsLockSQL, []any{ids, t.skus}, stock))
	}
	t.snap = nil
	if err := t.send(ctx, false, append(reads, t.snapshotStmt())...); err != nil {
		return nil, err
	}
	if stock == nil {
		return out, nil
	}
	t.locked, t.asked = stock, make(map[string]bool, len(stock))
	for _, sku := range t.skus {
		t.asked[sku] = true
	}
	for _, o := range out {
		if o.Status == hourglass.StatePendingPayment {
			for _, it := range o.Items {
				t.asked[it.SKU] = true
			}
		}
	}
	return out, nil
}

// prelockOrders is the most orders whose products LockOrders locks:
// reading their SKUs from the items in SQL cost 1 ms of server time for 512
// orders (against 0.45 ms to lock the SKUs listed), more than a round trip
// on a quiet machine, and a batch that large is worth two.
const prelockOrders = 64

// pendingProductsLockSQL is productsLockSQL of the SKUs of the pending
// orders of $1 (locked by the statement before) and of $2.
const pendingProductsLockSQL = `SELECT p.sku, p.category, p.available, p.reserved, p.sold FROM products p
WHERE p.sku = ANY(ARRAY(SELECT i->>'sku' FROM orders o CROSS JOIN LATERAL json_array_elements(o.items::json) AS i
	WHERE o.id = ANY((SELECT $1::bigint[])::bigint[]) AND (o.status = 'pending_payment') IS TRUE
	UNION SELECT unnest($2::text[])))
ORDER BY p.sku FOR UPDATE`

// lockProducts is a statement of productsLockSQL's columns, read into
// stock.
func (t *txn) lockProducts(sql string, args []any, stock plan.Stock) stmt {
	var (
		sku string
		p   plan.Product
	)
	return query("lock products", sql, args, []any{&sku, &p.Category, &p.Available, &p.Reserved, &p.Sold}, func() error {
		cp := p
		stock[sku] = &cp
		return nil
	})
}

// productsLockSQL locks the batch's product rows ($1) in SKU order (the
// primary key's, bytewise: sku is COLLATE "C"): one scan of the primary
// key for the array, whose rows come in key order, locked as they come
// (LockRows over the Index Scan, no Sort), whatever the statistics with
// enable_seqscan off. "IN (SELECT unnest($1))" hash-joined a sequential
// scan of every product (0.085 ms a batch on 1,000 products against 0.02
// ms); a LATERAL look-up per SKU (unnest … CROSS JOIN LATERAL (… FOR
// UPDATE)) cost 75 µs to this one's 44 for 8 SKUs (EXPLAIN ANALYZE, generic
// plans). The array is read through a sub-select so that the generic plan
// is kept (see the top of this file).
const productsLockSQL = `SELECT p.sku, p.category, p.available, p.reserved, p.sold FROM products p
WHERE p.sku = ANY((SELECT $1::text[])::text[]) ORDER BY p.sku FOR UPDATE`

// LockProducts answers from the products LockOrders locked when they
// cover skus (they do, unless no order was locked), else locks them.
func (t *txn) LockProducts(ctx context.Context, skus []string) (plan.Stock, error) {
	stock := plan.Stock{}
	if t.locked != nil && !slices.ContainsFunc(skus, func(sku string) bool { return !t.asked[sku] }) {
		for _, sku := range skus {
			if p := t.locked[sku]; p != nil {
				stock[sku] = p
			}
		}
		return stock, nil
	}
	if len(skus) == 1 {
		return stock, t.lockRead(ctx, t.lockProducts(productLockSQL, []any{skus[0]}, stock))
	}
	return stock, t.lockRead(ctx, t.lockProducts(productsLockSQL, []any{skus}, stock))
}

// productLockSQL is productsLockSQL of one SKU ($1), for a batch whose
// creates name one product (a quiet node's batch of one create of one
// item): an Index Scan by equality, without the array's sub-plan and the
// scan's array keys. With productUpdateSQL, 8 µs less server CPU a batch
// (docs/benchmarks/postgres-speed.md).
const productLockSQL = `SELECT p.sku, p.category, p.available, p.reserved, p.sold FROM products p WHERE p.sku = $1::text FOR UPDATE`

func (t *txn) lockTimers(ctx context.Context, where string, arg any) ([]*batch.Timer, error) {
	var out []*batch.Timer
	err := t.lockRead(ctx, stmt{name: "lock timers", sql: `SELECT ` + timerColumns + `, t.request_hash FROM timers t WHERE ` + where + ` FOR UPDATE`,
		args: []any{arg}, read: func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*batch.Timer, error) {
				bt := &batch.Timer{}
				var err error
				bt.T, err = scanTimer(row, &bt.Hash)
				return bt, err
			})
			return err
		}})
	return out, err
}

// LockTimerKeys takes the keys' advisory locks first (keyLockSQL): exactly
// one of several arms of a new key racing from several processes inserts
// it, and the others find its row.
func (t *txn) LockTimerKeys(ctx context.Context, keys []string) ([]*batch.Timer, error) {
	t.queue("lock timer keys", keyLockSQL, timerLockClass, keys)
	return t.lockTimers(ctx, `t.key = ANY((SELECT $1::text[])::text[]) ORDER BY t.key`, keys)
}

// LockTimerIDs wraps the state test in IS TRUE so that only the primary
// key serves it, never the (status, fire_at) index.
func (t *txn) LockTimerIDs(ctx context.Context, ids []int64) ([]*batch.Timer, error) {
	return t.lockTimers(ctx, `t.id = ANY((SELECT $1::bigint[])::bigint[]) AND (t.status = 'scheduled') IS TRUE ORDER BY t.id`, ids)
}

func (t *txn) Webhooks(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out := map[int64]bool{}
	var id int64
	err := t.lockRead(ctx, query("look up webhooks", `SELECT id FROM webhooks WHERE id = ANY($1::bigint[])`, []any{ids}, []any{&id}, func() error {
		out[id] = true
		return nil
	}))
	return out, err
}

func (t *txn) LockWebhooks(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out := map[int64]bool{}
	var id int64
	// The events are held back: their statement carries the deliveries to
	// these webhooks (InsertDeliveries, next).
	err := t.send(ctx, true, query("lock webhooks", `SELECT id FROM webhooks WHERE id = ANY($1::bigint[]) ORDER BY id FOR SHARE`, []any{ids}, []any{&id}, func() error {
		out[id] = true
		return nil
	}))
	return out, err
}

func (t *txn) InsertOrders(_ context.Context, orders []batch.NewOrder, now time.Time) error {
	if len(orders) > len(t.ids) {
		return fmt.Errorf("insert orders: %d ids drawn for %d orders", len(t.ids), len(orders))
	}
	n := len(orders)
	ids, users, items, deadlines := make([]int64, n), make([]string, n), make([]string, n), make([]int64, n)
	remindAt, remindBefore := make([]*int64, n), make([]int64, n)
	for i := range orders {
		orders[i].Order.ID = t.ids[i]
		o := &orders[i]
		ids[i], users[i], items[i], deadlines[i] = o.Order.ID, o.Order.UserID, o.Items, hourglass.UnixMilli(o.Order.Deadline)
		remindAt[i], remindBefore[i] = nullMs(o.Order.RemindAt), o.Order.RemindBefore.Milliseconds()
	}
	t.ids = t.ids[n:]
	t.queue("insert orders", `INSERT INTO orders (id, user_id, status, items, created_at, deadline, remind_at, remind_before_ms)
SELECT v.id, v.u, 'pending_payment', v.it, $1, v.d, v.ra, v.rb FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[]) AS v(id, u, it, d, ra, rb)`,
		hourglass.UnixMilli(now), ids, users, items, deadlines, remindAt, remindBefore)
	return nil
}

// UpdateOrders writes the largest set of orders that take the same values
// (a batch's closes) with one UPDATE … WHERE id = ANY, and the rest, if
// any, likewise when they share their values too, else with one statement
// of every row's values: for 512 closes the first took half the server
// time of the second (8 ms against 16, medians of 30), and a batch of
// closes with a few payments, each its own payment id, keeps it for its
// closes. "o.id = ANY(…)" keeps the planner to primary-key look-ups (see
// productsUpdateSQL), its array read through a sub-select (above).
func (t *txn) UpdateOrders(_ context.Context, dirty []*hourglass.Order) error {
	type shape struct {
		status          hourglass.State
		paid, closed    time.Time
		reason, payment string
	}
	groups := map[shape][]int64{}
	var order []shape
	for _, o := range dirty {
		k := shape{o.Status, o.PaidAt, o.ClosedAt, o.CloseReason, o.PaymentID}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], o.ID)
	}
	same := func(k shape) {
		t.queue("update orders", `UPDATE orders SET status = $2, paid_at = $3, closed_at = $4, close_reason = $5, payment_id = $6 WHERE id = ANY((SELECT $1::bigint[])::bigint[])`,
			groups[k], string(k.status), nullMs(k.paid), nullMs(k.closed), nullString(k.reason), nullString(k.payment))
	}
	if len(groups) <= 2 {
		for _, k := range order {
			same(k)
		}
		return nil
	}
	largest := slices.MaxFunc(order, func(a, b shape) int { return len(groups[a]) - len(groups[b]) })
	if len(groups[largest]) > 1 {
		same(largest)
		dirty = slices.DeleteFunc(slices.Clone(dirty), func(o *hourglass.Order) bool {
			return shape{o.Status, o.PaidAt, o.ClosedAt, o.CloseReason, o.PaymentID} == largest
		})
	}
	n := len(dirty)
	ids, status, paid, closed := make([]int64, n), make([]string, n), make([]*int64, n), make([]*int64, n)
	reason, payment := make([]*string, n), make([]*string, n)
	for i, o := range dirty {
		ids[i], status[i], paid[i], closed[i] = o.ID, string(o.Status), nullMs(o.PaidAt), nullMs(o.ClosedAt)
		reason[i], payment[i] = nullString(o.CloseReason), nullString(o.PaymentID)
	}
	t.queue("update orders", `UPDATE orders o SET status = v.s, paid_at = v.p, closed_at = v.c, close_reason = v.r, payment_id = v.pay
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[]) AS v(id, s, p, c, r, pay)
WHERE o.id = v.id AND o.id = ANY((SELECT $1::bigint[])::bigint[])`, ids, status, paid, closed, reason, payment)
	return nil
}

func (t *txn) ExtendOrder(_ context.Context, id int64, deadline time.Time) error {
	t.queue(fmt.Sprintf("extend order %d", id), `UPDATE orders SET deadline = $2 WHERE id = $1`, id, hourglass.UnixMilli(deadline))
	return nil
}

// productsUpdateSQL writes each SKU's row once. Its join alone was planned
// as a hash join over a sequential scan of every product, in the custom
// and the generic plan; "p.sku = ANY($1)" restricts the product side to
// the batch's SKUs (an index scan, or on a small table a scan that
// filters): on 1,000 products, 8 SKUs, about 90 µs less server CPU per
// commit (BenchmarkProductsUpdate). The rows are locked already, so the
// UPDATE's own order is free. The array is read through a sub-select (see
// the top of this file): on a products table never analyzed (a new
// database, autovacuum off) the joined write of a batch of creates was
// otherwise planned at every execution (0 generic, 12 custom plans; 0.16
// ms of planning a batch, EXPLAIN EXECUTE).
const productsUpdateSQL = `UPDATE products p SET available = p.available + d.da, reserved = p.reserved + d.dr, sold = p.sold + d.ds
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS d(sku, da, dr, ds) WHERE p.sku = d.sku AND p.sku = ANY((SELECT $1::text[])::text[])`

// productsUpdateFewSQL is productsUpdateSQL without its join, for at most
// productsUpdateFew SKUs: each row's deltas are found by its SKU's
// position in $1, so the plan is the Update over the primary key's Index
// Scan alone, without the Function Scan of four arrays, the Hash and the
// Hash Join: 8 µs less server CPU a batch of one create, 49 µs a batch of
// 32 (BenchmarkCreateBatch, docs/benchmarks/postgres-speed.md). The
// look-up is linear in the SKUs, so a larger batch keeps the join.
const productsUpdateFewSQL = `UPDATE products p SET available = p.available + ($2::bigint[])[array_position($1::text[], p.sku::text)],
	reserved = p.reserved + ($3::bigint[])[array_position($1::text[], p.sku::text)],
	sold = p.sold + ($4::bigint[])[array_position($1::text[], p.sku::text)]
WHERE p.sku = ANY((SELECT $1::text[])::text[])`

// productsUpdateFew is the most SKUs productsUpdateFewSQL updates.
const productsUpdateFew = 32

// productUpdateSQL is productsUpdateSQL of one SKU (see productLockSQL).
const productUpdateSQL = `UPDATE products p SET available = p.available + ($2::bigint[])[1], reserved = p.reserved + ($3::bigint[])[1],
	sold = p.sold + ($4::bigint[])[1]
WHERE p.sku = ($1::text[])[1]`

func (t *txn) UpdateProducts(_ context.Context, stock plan.Stock) error {
	skus := stock.Changed()
	da, dr, ds := make([]int64, len(skus)), make([]int64, len(skus)), make([]int64, len(skus))
	for i, sku := range skus {
		d := stock[sku].Delta
		da[i], dr[i], ds[i] = d[plan.Available], d[plan.Reserved], d[plan.Sold]
	}
	sql := productsUpdateSQL
	switch {
	case len(skus) == 1:
		sql = productUpdateSQL
	case len(skus) <= productsUpdateFew:
		sql = productsUpdateFewSQL
	}
	t.queue("update products", sql, skus, da, dr, ds)
	return nil
}

// timerArgs are the columns of timers as arrays.
type timerArgs struct {
	ids                  []int64
	keys, status         []string
	fireAt, created, upd []int64
	firedAt, hooks       []*int64
	payloads             []*string
	hashes               [][]byte
}

func newTimerArgs(timers []*batch.Timer) timerArgs {
	var a timerArgs
	for _, bt := range timers {
		tm := bt.T
		a.ids, a.keys, a.status = append(a.ids, tm.ID), append(a.keys, tm.Key), append(a.status, string(tm.Status))
		a.fireAt, a.created, a.upd = append(a.fireAt, hourglass.UnixMilli(tm.FireAt)), append(a.created, hourglass.UnixMilli(tm.CreatedAt)), append(a.upd, hourglass.UnixMilli(tm.UpdatedAt))
		var hook *int64
		if tm.WebhookID != 0 {
			hook = &tm.WebhookID
		}
		var payload *string
		if tm.Payload != nil {
			p := string(tm.Payload)
			payload = &p
		}
		a.firedAt, a.hooks, a.payloads, a.hashes = append(a.firedAt, nullMs(tm.FiredAt)), append(a.hooks, hook), append(a.payloads, payload), append(a.hashes, bt.Hash)
	}
	return a
}

// InsertTimers inserts in key order and reads the ids back by key.
func (t *txn) InsertTimers(ctx context.Context, timers []*batch.Timer) error {
	a := newTimerArgs(timers)
	byKey := make(map[string]*batch.Timer, len(timers))
	for _, bt := range timers {
		byKey[bt.T.Key] = bt
	}
	var (
		id  int64
		key string
	)
	return t.send(ctx, false, query("insert timers", `INSERT INTO timers (key, status, fire_at, payload, webhook_id, request_hash, created_at, updated_at)
SELECT v.k, v.s, v.f, v.p, v.w, v.h, v.c, v.u FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bytea[], $7::bigint[], $8::bigint[])
	WITH ORDINALITY AS v(k, s, f, p, w, h, c, u, n) ORDER BY v.n
RETURNING id, key`, []any{a.keys, a.status, a.fireAt, a.payloads, a.hooks, a.hashes, a.created, a.upd}, []any{&id, &key}, func() error {
		bt := byKey[key]
		if bt == nil {
			return fmt.Errorf("timer %q came back unasked", key)
		}
		if !hourglass.IsTimerID(id) {
			return fmt.Errorf("id %d is below hourglass.TimerIDBase: the timers table's identity was changed", id)
		}
		bt.T.ID = id
		return nil
	}))
}

func (t *txn) RearmTimers(_ context.Context, timers []*batch.Timer) error {
	a := newTimerArgs(timers)
	t.queue("re-arm timers", `UPDATE timers t SET status = v.s, fire_at = v.f, fired_at = v.fd, payload = v.p, webhook_id = v.w, request_hash = v.h, updated_at = v.u
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bytea[], $8::bigint[]) AS v(id, s, f, fd, p, w, h, u)
WHERE t.id = v.id AND t.id = ANY((SELECT $1::bigint[])::bigint[])`, a.ids, a.status, a.fireAt, a.firedAt, a.payloads, a.hooks, a.hashes, a.upd)
	return nil
}

func (t *txn) SetTimers(_ context.Context, status hourglass.TimerStatus, ids []int64, now time.Time) error {
	query := `UPDATE timers SET status = 'cancelled', updated_at = $1 WHERE id = ANY((SELECT $2::bigint[])::bigint[])`
	if status == hourglass.TimerFired {
		query = `UPDATE timers SET status = 'fired', fired_at = $1, updated_at = $1 WHERE id = ANY((SELECT $2::bigint[])::bigint[])`
	}
	t.queue("set timers "+string(status), query, hourglass.UnixMilli(now), ids)
	return nil
}

// InsertEvents keeps the events for eventsSQL, which also creates their
// deliveries: Seq is left unset.
func (t *txn) InsertEvents(_ context.Context, events []*batch.Event, now time.Time) error {
	if t.sent || len(t.events) > 0 {
		return errors.New("insert events: a batch inserts its events once")
	}
	t.events, t.at, t.mode = events, now, make(map[*batch.Event]string, len(events))
	return nil
}

// fanOutMode records how eventsSQL delivers events.
func (t *txn) fanOutMode(what, mode string, events []*batch.Event) error {
	if t.sent {
		return fmt.Errorf("%s: the events were sent already", what)
	}
	for _, e := range events {
		t.mode[e] = mode
	}
	return nil
}

func (t *txn) DeferFanOut(_ context.Context, events []*batch.Event) error {
	return t.fanOutMode("defer fan-out", "defer", events)
}

func (t *txn) InsertDeliveries(_ context.Context, events []*batch.Event, _ time.Time) error {
	return t.fanOutMode("insert deliveries", "pinned", events)
}

// FanOut returns 0: the deliveries are counted when eventsSQL's answer is
// read, and Run adds them.
func (t *txn) FanOut(_ context.Context, events []*batch.Event, _ time.Time) (int, error) {
	return 0, t.fanOutMode("fan out events", "fan", events)
}

// eventsSQL inserts a batch's events ($2..$5, at $1) and their deliveries,
// by each one's mode ($6): to the webhooks subscribed now (fan), to its
// own webhook $7 (pinned), or left to the fan-out loop in one
// fanout_pending row (defer); and, when it created deliveries, NOTIFYs
// the other processes on $8 at commit; $9 and $10 are a close's or fire's
// provenance (hourglass.Closer; NULL: none). It returns the deliveries created
// for subscriptions. The deliveries' foreign key share-locks their
// webhooks, so a concurrent DeleteWebhook waits for this commit.
const eventsSQL = `WITH ` + eventsCTEs + `
SELECT ` + eventsFanned + `, ` + eventsNotified

// eventsCTEs, eventsFanned and eventsNotified are eventsSQL's parts, for
// combine.
const (
	eventsCTEs = `v AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $9::text[], $10::text[]) WITH ORDINALITY AS v(id, type, order_id, body, mode, hook, cause, node, n)
), e AS (
	INSERT INTO events (id, type, order_id, created_at, body, cause, node)
	SELECT v.id, v.type, v.order_id, $1, v.body, v.cause, v.node FROM v ORDER BY v.n
	RETURNING seq, id
), x AS (
	SELECT e.seq, v.type, v.order_id, v.mode, v.hook FROM e JOIN v ON v.id = e.id
), d AS (
	INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
	SELECT s.webhook_id, x.seq, x.order_id, 'pending', $1 FROM x JOIN webhook_subscriptions s ON s.type IN (x.type, '*') WHERE x.mode = 'fan'
	RETURNING 1
), p AS (
	INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
	SELECT x.hook, x.seq, x.order_id, 'pending', $1 FROM x WHERE x.mode = 'pinned'
	RETURNING 1
), f AS (
	INSERT INTO fanout_pending (seqs) SELECT array_agg(x.seq ORDER BY x.seq) FROM x WHERE x.mode = 'defer' HAVING count(*) > 0
), n AS (
	SELECT pg_notify($8, '') FROM (SELECT 1 FROM (SELECT 1 FROM d UNION ALL SELECT 1 FROM p) AS y LIMIT 1) AS z
)`
	eventsFanned   = `(SELECT count(*) FROM d)`
	eventsNotified = `(SELECT count(*) FROM n)`
)

// plainEventsSQL inserts a batch's events ($2..$5, $6 and $7 their cause
// and node, at $1) when none has a delivery to make: eventsSQL's first
// step alone, without the joins of its fan-out. Its arrays are unnested in
// the select list (a ProjectSet, which steps them together and emits the
// rows in the arrays' order, so the events' seq follows the batch) rather
// than in FROM (a Function Scan, which copies each array into a tuplestore
// of its own first).
const plainEventsSQL = `INSERT INTO events (id, type, order_id, created_at, body, cause, node)
SELECT unnest($2::text[]), unnest($3::text[]), unnest($4::bigint[]), $1, unnest($5::text[]), unnest($6::text[]), unnest($7::text[])`

// closerColumns are an event's cause and node columns: NULL when the
// close's provenance is unknown (the node NULL when not named too).
func closerColumns(by hourglass.Closer) (cause, node *string) {
	if by.Cause == "" {
		return nil, nil
	}
	c := string(by.Cause)
	if by.Node != "" {
		n := by.Node
		node = &n
	}
	return &c, node
}

func (t *txn) eventsStmt() stmt {
	n := len(t.events)
	ids, types, orders := make([]string, n), make([]string, n), make([]int64, n)
	bodies, modes, hooks := make([]*string, n), make([]string, n), make([]*int64, n)
	causes, nodes := make([]*string, n), make([]*string, n)
	for i, e := range t.events {
		causes[i], nodes[i] = closerColumns(e.By)
		ids[i], types[i], orders[i], modes[i] = e.ID, string(e.Type), e.Subject, t.mode[e]
		if e.Body != nil {
			b := string(e.Body)
			bodies[i] = &b
		}
		if modes[i] == "pinned" {
			hooks[i] = &e.WebhookID
		}
	}
	if !slices.ContainsFunc(modes, func(m string) bool { return m != "" }) {
		return stmt{name: "insert events", sql: plainEventsSQL, args: []any{hourglass.UnixMilli(t.at), ids, types, orders, bodies, causes, nodes}, target: "events", kind: addsRows}
	}
	st := stmt{name: "insert events", sql: eventsSQL, args: []any{hourglass.UnixMilli(t.at), ids, types, orders, bodies, modes, hooks, t.s.channel, causes, nodes},
		target: "events", kind: addsRows, with: eventsCTEs, cols: []string{eventsFanned, eventsNotified}, answer: func(counts []int64) { t.fanned = int(counts[0]) }}
	st.read = func(br pgx.BatchResults) error {
		counts := make([]int64, 2)
		err := scanCounts(br, counts)
		st.answer(counts)
		return err
	}
	return st
}

// LockDeliveries wraps the state test in IS TRUE so that only the primary
// key serves it.
func (t *txn) LockDeliveries(ctx context.Context, ids []int64) ([]*batch.Delivery, error) {
	var (
		out []*batch.Delivery
		d   batch.Delivery
		at  int64
	)
	err := t.send(ctx, false, query("lock deliveries", `SELECT id, attempts, next_attempt_at FROM webhook_deliveries
WHERE id = ANY((SELECT $1::bigint[])::bigint[]) AND (state = 'pending') IS TRUE ORDER BY id FOR UPDATE`, []any{ids}, []any{&d.ID, &d.Attempts, &at}, func() error {
		cp := d
		cp.NextAt = hourglass.FromUnixMilli(at)
		out = append(out, &cp)
		return nil
	}))
	return out, err
}

func (t *txn) UpdateDelivery(_ context.Context, d *batch.Delivery, now time.Time) error {
	if d.Dead {
		t.queue("record attempts", `UPDATE webhook_deliveries SET state = 'dead', attempts = $2, last_error = $3, failed_at = $4 WHERE id = $1`,
			d.ID, d.Attempts, d.LastError, hourglass.UnixMilli(now))
		return nil
	}
	t.queue("record attempts", `UPDATE webhook_deliveries SET attempts = $2, last_error = $3, next_attempt_at = $4 WHERE id = $1`,
		d.ID, d.Attempts, d.LastError, hourglass.UnixMilli(d.NextAt))
	return nil
}

func (t *txn) DeleteDeliveries(_ context.Context, ids []int64) error {
	t.queue("record attempts", `DELETE FROM webhook_deliveries WHERE id = ANY((SELECT $1::bigint[])::bigint[])`, ids)
	return nil
}

// streamHeadsSQL reads the head of each listed (webhook, order) stream
// after the attempts: a later statement of the same transaction, so it
// sees them.
const streamHeadsSQL = `SELECT s.w, s.o, n.id, n.next_attempt_at FROM unnest($1::bigint[], $2::bigint[]) AS s(w, o)
CROSS JOIN LATERAL (SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE webhook_id = s.w AND order_id = s.o AND state = 'pending' ORDER BY event_seq LIMIT 1) n`

func (t *txn) StreamHeads(ctx context.Context, streams []batch.Stream) (map[batch.Stream]hourglass.DeliveryTimer, error) {
	hw, ho := make([]int64, len(streams)), make([]int64, len(streams))
	for i, st := range streams {
		hw[i], ho[i] = st.Webhook, st.Order
	}
	heads := map[batch.Stream]hourglass.DeliveryTimer{}
	var (
		st     batch.Stream
		id, at int64
	)
	err := t.send(ctx, false, query("next deliveries", streamHeadsSQL, []any{hw, ho}, []any{&st.Webhook, &st.Order, &id, &at}, func() error {
		heads[st] = hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}
		return nil
	}))
	return heads, err
}

// InsertOutbox moves the row of a re-armed timer or an extended order
// that is still there.
func (t *txn) InsertOutbox(_ context.Context, due []hourglass.DueItem) error {
	ids, at := make([]int64, 0, len(due)), make([]int64, 0, len(due))
	seen := make(map[int64]int, len(due))
	for _, d := range due {
		if i, ok := seen[d.ID]; ok { // one row once per statement: the last wins
			at[i] = hourglass.UnixMilli(d.At)
			continue
		}
		seen[d.ID] = len(ids)
		ids, at = append(ids, d.ID), append(at, hourglass.UnixMilli(d.At))
	}
	t.queue("insert outbox timers", `INSERT INTO timer_outbox (order_id, deadline) SELECT * FROM unnest($1::bigint[], $2::bigint[])
ON CONFLICT (order_id) DO UPDATE SET deadline = excluded.deadline`, ids, at)
	return nil
}

func (t *txn) InsertKeys(_ context.Context, keys []batch.IdempotencyKey, now time.Time) error {
	ks, hashes, ids := make([]string, len(keys)), make([][]byte, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		ks[i], hashes[i], ids[i] = k.Key, k.Hash, k.OrderID
		if hashes[i] == nil {
			hashes[i] = []byte{}
		}
	}
	t.queue("insert idempotency keys", `INSERT INTO idempotency_keys (key, request_hash, order_id, created_at)
SELECT v.k, v.h, v.id, $1 FROM unnest($2::text[], $3::bytea[], $4::bigint[]) AS v(k, h, id)`, hourglass.UnixMilli(now), ks, hashes, ids)
	return nil
}

// Announce NOTIFYs the created-orders channel at commit (cluster.go): the
// other processes' WatchCreated; a group commit holds the payloads instead
// while its node is alone (quiet.go).
func (t *txn) Announce(_ context.Context, now time.Time, due []hourglass.DueItem) error {
	payloads := t.s.createdPayloads(now, due)
	switch {
	case len(payloads) == 0:
	case t.mayHold && t.s.quiet.holds(realNow()):
		t.held = append(t.held, payloads...)
	default:
		t.queue("announce", announceSQL, t.s.createdChannel, payloads)
	}
	return nil
}

// createdPayloads returns the NOTIFY payloads announcing due, made due at
// now, or none when the store has no created-orders channel (a store that
// only migrates, or muted by a benchmark). With Config.AnnounceWithin,
// items due later than that after now are left out: beyond every node's
// window, their owner's loader brings them.
func (s *Store) createdPayloads(now time.Time, due []hourglass.DueItem) []string {
	if s.createdChannel == "" {
		return nil
	}
	ids, deadlines := make([]int64, 0, len(due)), make([]int64, 0, len(due))
	for _, d := range due {
		if within := s.cfg.AnnounceWithin; within > 0 && d.At.Sub(now) > within {
			continue
		}
		ids, deadlines = append(ids, d.ID), append(deadlines, hourglass.UnixMilli(d.At))
	}
	if len(ids) == 0 {
		return nil
	}
	return createdPayloads(s.origin, ids, deadlines)
}

// writeRequests is sqlq.TimerRequestWrites: the requests that run, as one
// batch of ArmTimer's and CancelTimer's ops (batch.RunRequests: the same
// locks, decisions and statements) inside the requests' transaction.
func (s *Store) writeRequests(ctx context.Context, x sqlq.Querier, _ time.Time, p plan.TimerRequests) (func(), error) {
	t := &txn{s: s, q: x.(pgQuerier).q.(pgx.Tx)}
	out, err := batch.RunRequests(ctx, s.batchConfig(), t, p)
	if err == nil {
		err = t.flush(ctx)
	}
	if err != nil || !out.Deferred {
		return nil, err
	}
	return s.fanOut.Wake, nil
}

func nullMs(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ms := hourglass.UnixMilli(t)
	return &ms
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
