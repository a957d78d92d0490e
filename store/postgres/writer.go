package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit.
//
// The order writes (create, pay, cancel/ship/complete, close) and the named
// timers' (arm, cancel, fire) are queued and taken in batches of up to
// Config.MaxBatch by the writer goroutine (see writers), which runs each
// batch as one transaction on one pooled connection, in two or three
// pipelined round trips (pgx.Batch) whatever the batch's size:
//
//  1. BEGIN, then the timer writes (see timerWrites in timers.go: a few
//     set-based statements whatever their number), then the order-first writes (pay, transitions, close): one
//     statement locks every order row they name (SELECT … FOR UPDATE, ids
//     ascending), then each runs a compare-and-set UPDATE whose "now" is
//     read after the locks are held, so a wait for a lock can never let a
//     payment through after its deadline. A refusal is zero rows, not an
//     error.
//  2. Only when the batch has creates: their idempotency keys' advisory
//     locks and rows, the policy, the product rows of every SKU the batch
//     touches locked FOR UPDATE in SKU order, the database's now and the
//     new orders' ids. (With no order-first writes this is round trip 1.)
//     Go then decides in queue order which creates fit the locked stock.
//  3. One UPDATE of products for the whole batch (each SKU's row written
//     once, however many orders of the batch reserve or release it: the hot
//     SKU case), one INSERT of the new orders (with their outbox timers and
//     idempotency keys), one INSERT of the events that fans out deliveries
//     with INSERT … SELECT and NOTIFYs other processes of the deliveries and
//     the created orders and armed timers (WatchCreated, see cluster.go),
//     the fired timers' events, and COMMIT.
//
// Webhook delivery attempts (RecordAttempt, attempts.go) come in the low
// lane: a batch takes them only into the room its closes and API writes
// leave, and records them all with two statements before COMMIT (a batch of
// attempts alone is one round trip).
//
// Locks are taken in one order (timer rows, then order rows, then
// idempotency keys, then products by SKU), so batches of several processes
// do not deadlock each other in the common cases. A write refused for a
// domain reason fails only itself; retries (retryPolicy), the bisection of
// a batch a broken write failed and the handling of a lost connection are
// the writer's (store/internal/writer).

// opKind names the order write an op carries.
type opKind int

const (
	opCreate opKind = iota
	opPay
	opTransition
	opClose
	opExtend // ExtendOrder: an order-first write, like a pay
	// Named timers' writes (timers.go).
	opArmTimer
	opCancelTimer
	opFireTimers
	// A webhook delivery attempt's outcome (attempts.go), in the low lane.
	opRecordAttempt
)

// op is one order write waiting for the writer. Outputs are valid once its
// Submit returned.
type op struct {
	kind opKind
	// Inputs.
	create    hourglass.CreateOrderParams
	items     string // create: the items, encoded
	id        int64  // pay, transition, extend
	paymentID string
	late      bool                        // pay: PayDueOrder (no deadline check)
	extend    hourglass.ExtendOrderParams // extend
	action    hourglass.Action
	from, to  hourglass.State
	ids       []int64 // close, fire timers
	arm       armArgs // arm timer
	key       string  // cancel timer
	attempt   hourglass.AttemptResult
	// Outputs.
	order    hourglass.Order
	created  bool // create, arm timer
	extended bool // extend: the deadline moved (not a repeat)
	closed   []hourglass.ClosedOrder
	timer    hourglass.Timer // arm timer, cancel timer
	fired    []hourglass.FiredTimer
	record   hourglass.AttemptRecord
	err      error
}

func (o *op) reset() {
	o.order, o.created, o.extended, o.closed, o.err = hourglass.Order{}, false, false, nil, nil
	o.timer, o.fired, o.record = hourglass.Timer{}, nil, hourglass.AttemptRecord{}
}

func (o *op) Fail(err error) { o.reset(); o.err = err }
func (o *op) Err() error     { return o.err }

// retryPolicy is PostgreSQL's: a serialization failure or a deadlock rolls
// the transaction back, and it runs again at once, at most 5 attempts in
// all. Locks are taken in one order, so a retry is rare and meets a
// different interleaving; a batch gives up after writeTimeout.
func retryPolicy() writer.RetryPolicy {
	return writer.RetryPolicy{Attempts: 5, Timeout: writeTimeout}
}

// dialect is the store as the group-commit writer sees it.
type dialect struct{ *Store }

// Run runs ops in one transaction on a pooled connection (runTx). It
// returns the number of deliveries created.
func (d dialect) Run(ctx context.Context, ops []*op) (int, error) {
	for _, o := range ops {
		o.reset()
	}
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
	return int(n), nil
}

// Classify implements writer.Dialect.
func (dialect) Classify(err error) writer.Class { return classify(err) }

// batchState is what a batch's writes add up to, written in its last round
// trip.
type batchState struct {
	deltas map[string]*[3]int64 // by SKU: available, reserved, sold
	events struct {
		ids, types []string
		orders     []int64
		at         []int64
		bodies     []*string // stored with the event (order.extended), else nil
	}
	extended []*op // extensions that moved a deadline: their outbox rows
	refused  []*op // order-first writes that matched nothing: look up why
}

// move records the moves of items' quantities from one bucket to another.
func (st *batchState) move(items []hourglass.Item, from, to plan.Bucket) {
	for _, it := range items {
		var d [3]int64
		d[from], d[to] = -it.Quantity, it.Quantity
		st.add(it.SKU, d)
	}
}

// add records a net change of a SKU's stock.
func (st *batchState) add(sku string, d [3]int64) {
	if st.deltas == nil {
		st.deltas = make(map[string]*[3]int64)
	}
	if st.deltas[sku] == nil {
		st.deltas[sku] = &[3]int64{}
	}
	for i := range d {
		st.deltas[sku][i] += d[i]
	}
}

func (st *batchState) event(orderID int64, status hourglass.State, atMs int64) {
	st.events.ids = append(st.events.ids, hourglass.NewEventID())
	st.events.types = append(st.events.types, string(hourglass.EventFor(status)))
	st.events.orders = append(st.events.orders, orderID)
	st.events.at = append(st.events.at, atMs)
	st.events.bodies = append(st.events.bodies, nil)
}

// extendedEvent records the order.extended event of o, extended at atMs,
// with its body: the deadline it set must survive a later extension (see
// hourglass.Order.AsOf).
func (st *batchState) extendedEvent(o hourglass.Order, atMs int64) {
	id := hourglass.NewEventID()
	body := string(sqlq.RenderEvent(id, hourglass.EventOrderExtended, atMs, o))
	st.events.ids = append(st.events.ids, id)
	st.events.types = append(st.events.types, string(hourglass.EventOrderExtended))
	st.events.orders = append(st.events.orders, o.ID)
	st.events.at = append(st.events.at, atMs)
	st.events.bodies = append(st.events.bodies, &body)
}

// skus returns the SKUs whose stock the batch changes, sorted.
func (st *batchState) skus() []string {
	out := make([]string, 0, len(st.deltas))
	for sku := range st.deltas {
		out = append(out, sku)
	}
	slices.Sort(out)
	return out
}

// The statements of a batch. $1 is always the now parameter.
const (
	lockOrdersSQL = `SELECT 1 FROM orders WHERE id = ANY($1) ORDER BY id FOR UPDATE`
	// Every statement keyed by order ids wraps its state and deadline test
	// in IS TRUE so that no index but the primary key can serve it: given
	// the (status, deadline) index, the planner (a generic plan, or stale
	// statistics) may otherwise scan every pending order to find the few
	// listed.
	//
	// The compare-and-set of a payment: only a pending order strictly before
	// its deadline. The closer's is the mirror image (deadline <= now).
	paySQL = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms)
UPDATE orders o SET status = 'paid', paid_at = now.ms, payment_id = $3 FROM now
WHERE o.id = $2 AND (o.status = 'pending_payment' AND o.deadline > now.ms) IS TRUE
RETURNING ` + orderColumns + `, now.ms`
	// payDueSQL is PayDueOrder's: any pending order, whatever its deadline
	// (the payment check before the close answered paid).
	payDueSQL = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms)
UPDATE orders o SET status = 'paid', paid_at = now.ms, payment_id = $3 FROM now
WHERE o.id = $2 AND (o.status = 'pending_payment') IS TRUE
RETURNING ` + orderColumns + `, now.ms`
	// extendSQL is an extension's compare-and-set, plan.Extend's decision
	// in SQL: the new deadline ($3, or the deadline plus $4 ms) later than
	// the deadline and than now, at most $6 ms after created_at; the order
	// pending and, unless $5 (the payment check's), before its deadline.
	// A refusal (or a repeat) matches nothing and is looked up.
	extendSQL = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms),
t AS (SELECT o.id, CASE WHEN $4::bigint <> 0 THEN o.deadline + $4::bigint ELSE $3::bigint END AS d FROM orders o WHERE o.id = $2)
UPDATE orders o SET deadline = t.d FROM now, t
WHERE o.id = $2 AND t.id = o.id AND (o.status = 'pending_payment' AND ($5::boolean OR o.deadline > now.ms)
	AND t.d > o.deadline AND t.d > now.ms AND t.d <= o.created_at + $6::bigint) IS TRUE
RETURNING ` + orderColumns + `, now.ms`
	// A cancel, like a payment, is refused at or after the deadline: by then
	// the order belongs to the closer.
	transitionSQL = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms)
UPDATE orders o SET status = $4 FROM now
WHERE o.id = $2 AND (o.status = $3 AND ($3 <> 'pending_payment' OR o.deadline > now.ms)) IS TRUE
RETURNING ` + orderColumns + `, now.ms`
	// closeSQL closes in SQL, the one decision of the planner's
	// (plan.Closes: pending and due) that PostgreSQL keeps as a
	// compare-and-set: it is the fast path of a burst of closes. The
	// planner's way (read the locked rows, decide in Go, UPDATE the closed
	// ids in the batch's last round trip) was measured against it with
	// BenchmarkCloseOrders (512 closes a call, 40 calls, five alternated
	// pairs on 2 loaded cores, 2026-11-25): this statement 41.6-57.0k
	// closes/s (median 43.7k), the planner's 35.6-47.7k (median 42.1k),
	// faster in four pairs of five. It reads back only the orders it
	// closes, where the planner's read returns every listed order, and
	// needs no second statement. Its refusal is no refusal: a close that
	// matches nothing has nothing to do.
	closeSQL = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms)
UPDATE orders o SET status = 'closed', closed_at = now.ms, close_reason = 'timeout' FROM now
WHERE o.id = ANY($2) AND (o.status = 'pending_payment' AND o.deadline <= now.ms) IS TRUE
RETURNING o.id, o.items, o.deadline, now.ms`
	lookUpSQL = `SELECT ` + orderColumns + `, COALESCE($1::bigint, ` + dbNow + `) FROM orders o WHERE o.id = $2`

	idemLockSQL = `SELECT pg_advisory_xact_lock($1::int, h) FROM
(SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY 1) AS x`
	idemReadSQL = `SELECT ` + orderColumns + `, k.key, k.request_hash
FROM idempotency_keys k JOIN orders o ON o.id = k.order_id WHERE k.key IN (SELECT unnest($1::text[]))`
	policyReadSQL = `SELECT value FROM settings WHERE name = 'policy'`
	// The batch's product rows, locked in SKU order: $1 is sorted, and
	// each SKU is one primary-key look-up (a LATERAL subquery with its own
	// FOR UPDATE, run once per element in the array's order), whatever the
	// statistics. "IN (SELECT unnest($1))" hash-joined a sequential scan of
	// every product, in the custom and the generic plan alike: on 1,000
	// products, 0.085 ms a batch against 0.02 ms, paid once per commit, so
	// most where batches are small (several nodes).
	productsLockSQL = `SELECT p.sku, p.category, p.available FROM unnest($1::text[]) AS k(sku)
CROSS JOIN LATERAL (SELECT p.sku, p.category, p.available FROM products p WHERE p.sku = k.sku FOR UPDATE) p`
	productsOnlyLock = `SELECT 1 FROM unnest($1::text[]) AS k(sku) CROSS JOIN LATERAL (SELECT FROM products p WHERE p.sku = k.sku FOR UPDATE) p`
	nowSQL           = `SELECT COALESCE($1::bigint, ` + dbNow + `)`
	idsSQL           = `SELECT nextval($1::regclass) FROM generate_series(1, $2::int)`
	// One UPDATE per batch, each SKU's row written once. Its join alone was
	// planned as a hash join over a sequential scan of every product, in
	// the custom and the generic plan; "p.sku = ANY($1)" restricts the
	// product side to the batch's SKUs (an index scan, or on a small table a
	// scan that filters): on 1,000 products, 8 SKUs, about 90 µs less server
	// CPU per commit (BenchmarkProductsUpdate). The rows are locked already
	// (productsLockSQL or productsOnlyLock, in SKU order), so the UPDATE's
	// own order is free.
	productsUpdateSQL = `UPDATE products p SET available = p.available + d.da, reserved = p.reserved + d.dr, sold = p.sold + d.ds
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS d(sku, da, dr, ds) WHERE p.sku = d.sku AND p.sku = ANY($1::text[])`
	insertOrdersSQL = `WITH o AS (
	INSERT INTO orders (id, user_id, status, items, created_at, deadline)
	SELECT v.id, v.u, 'pending_payment', v.it, $1, v.d FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[]) AS v(id, u, it, d)
	RETURNING id, deadline
), t AS (
	INSERT INTO timer_outbox (order_id, deadline) SELECT id, deadline FROM o WHERE $6::boolean
)
INSERT INTO idempotency_keys (key, request_hash, order_id, created_at)
SELECT v.k, v.h, v.id, $1 FROM unnest($7::text[], $8::bytea[], $9::bigint[]) AS v(k, h, id)`
	// The events of the batch, their deliveries (one per subscribed webhook,
	// due at the event's time) and, if any, a NOTIFY delivered at commit;
	// the deliveries of events of type $8 (order.closed in a burst, NULL
	// otherwise) are deferred instead: one fanout_pending row lists those
	// events when a webhook is subscribed to anything (see fanout.go);
	// and the NOTIFY of the created orders ($7: payloads of createdPayloads,
	// none when the batch created nothing) on their channel $6, for other
	// store values' WatchCreated (see cluster.go). One statement, not one
	// more: it runs in every batch that creates.
	eventsSQL = `WITH e AS (
	INSERT INTO events (id, type, order_id, created_at, body)
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $9::text[])
	RETURNING seq, type, order_id, created_at
), d AS (
	INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
	SELECT s.webhook_id, e.seq, e.order_id, 'pending', e.created_at
	FROM e JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
	WHERE e.type IS DISTINCT FROM $8
	RETURNING 1
), f AS (
	INSERT INTO fanout_pending (seqs)
	SELECT array_agg(e.seq ORDER BY e.seq) FROM e
	WHERE e.type = $8 AND EXISTS (SELECT 1 FROM webhook_subscriptions)
	HAVING count(*) > 0
	RETURNING 1
), n AS (
	SELECT pg_notify($5, '') FROM (SELECT 1 FROM d LIMIT 1) AS x
), c AS (
	SELECT pg_notify($6, p) FROM unnest($7::text[]) AS p
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM n), (SELECT count(*) FROM c), (SELECT count(*) FROM f)`
)

// idemLockClass is the first key of the idempotency keys' advisory locks.
const idemLockClass int32 = 0x68676b31 // "hgk1"

// runTx runs the batch's transaction; see the comment at the top.
func (s *Store) runTx(ctx context.Context, conn *pgx.Conn, ops []*op) (int64, error) {
	now := s.nowArg()
	var creates, first, attempts []*op
	tw := &timerWrites{}
	for _, o := range ops {
		switch o.kind {
		case opRecordAttempt:
			attempts = append(attempts, o)
		case opCreate:
			creates = append(creates, o)
		case opArmTimer:
			tw.arms = append(tw.arms, o)
		case opCancelTimer:
			tw.cancels = append(tw.cancels, o)
		case opFireTimers:
			tw.fires = append(tw.fires, o)
		default:
			first = append(first, o)
		}
	}
	st := &batchState{}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// The timers' writes first: every batch locks timer rows before order
	// rows, idempotency keys and products.
	tw.queue(b, now, s.cfg.Outbox)
	if len(first) > 0 {
		// Every order row the batch changes, locked by one statement in
		// id order: two batches (of this process or another) cannot
		// deadlock on orders.
		var ids []int64
		for _, o := range first {
			if o.kind == opClose {
				ids = append(ids, o.ids...)
			} else {
				ids = append(ids, o.id)
			}
		}
		b.Queue(lockOrdersSQL, ids)
	}
	for _, o := range first {
		s.queueFirst(b, o, now, st)
	}
	var cr *createReads
	if len(first) == 0 && len(creates) > 0 {
		cr = s.queueCreateReads(b, creates, nil, now)
	}
	if b.Len() > 1 { // more than BEGIN: a batch of attempts alone needs one round trip
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return 0, err
		}
		b = &pgx.Batch{}
	}
	for _, o := range st.refused {
		queueLookUp(b, o, now)
	}
	if cr == nil && len(creates) > 0 {
		cr = s.queueCreateReads(b, creates, st.skus(), now)
	}
	if cr != nil && b.Len() > 0 {
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return 0, err
		}
		b = &pgx.Batch{}
	}
	var accepted []*op
	if cr != nil {
		var err error
		if accepted, err = s.decideCreates(cr, creates, st); err != nil {
			return 0, err
		}
	}
	var stockErr error
	if len(st.deltas) > 0 {
		skus := st.skus()
		if cr == nil {
			b.Queue(productsOnlyLock, skus)
		}
		da, dr, ds := make([]int64, len(skus)), make([]int64, len(skus)), make([]int64, len(skus))
		for i, sku := range skus {
			d := st.deltas[sku]
			da[i], dr[i], ds[i] = d[plan.Available], d[plan.Reserved], d[plan.Sold]
		}
		b.Queue(productsUpdateSQL, skus, da, dr, ds).Exec(func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() != int64(len(skus)) { // cannot happen: the rows are locked
				stockErr = fmt.Errorf("update stock of %d products: %d rows found", len(skus), ct.RowsAffected())
			}
			return nil
		})
	}
	if len(accepted) > 0 {
		queueInsertOrders(b, accepted, cr.now, s.cfg.Outbox)
	}
	if len(st.extended) > 0 && s.cfg.Outbox {
		queueOutboxMoves(b, st.extended)
	}
	timerEvents, err := tw.events()
	if err != nil {
		return 0, err
	}
	// COMMIT is in the same pipeline, so from here on a callback's error
	// does not roll anything back: the callbacks only record, and only the
	// server's own errors (which abort the transaction) count as a
	// rollback.
	var (
		fanned, timerFanned, deferred int64
		scanErr, timerErr             error
	)
	if timerEvents != nil {
		e := timerEvents
		b.Queue(timerEventsSQL, e.ids, e.timers, e.at, e.bodies, e.hooks, s.channel).QueryRow(func(row pgx.Row) error {
			var notified int64
			timerErr = row.Scan(&timerFanned, &notified)
			return nil
		})
	}
	// The created orders and the armed timers are announced together: one
	// NOTIFY (or a few, when long) per batch, in the events statement.
	if payloads := s.createdPayloads(accepted, tw.armed, st.extended); len(st.events.ids) > 0 || len(payloads) > 0 {
		b.Queue(eventsSQL, st.events.ids, st.events.types, st.events.orders, st.events.at, s.channel,
			s.createdChannel, payloads, s.deferredType(ops), st.events.bodies).QueryRow(func(row pgx.Row) error {
			var notified, announced int64
			scanErr = row.Scan(&fanned, &notified, &announced, &deferred)
			return nil
		})
	}
	var attemptErr error
	queueAttempts(b, attempts, now, &attemptErr)
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if pgCode(err) != "" {
			return 0, err // the server refused a statement: rolled back
		}
		return 0, writer.OutcomeUnknown(err)
	}
	if deferred > 0 {
		s.fanOut.Wake()
	}
	if stockErr != nil || scanErr != nil || timerErr != nil || attemptErr != nil {
		s.log.Error("postgres: a committed batch read back unexpected results", "stock", stockErr, "events", scanErr, "timer events", timerErr, "attempts", attemptErr)
		fanned = 1 // wake the delivery engine anyway
	}
	return fanned + timerFanned, nil
}

// deferredType returns the event type whose deliveries a batch of ops
// leaves to the fan-out loop (fanout.go), or nil for none: order.closed
// when the batch's closes are part of a burst (fanout.Burst), so the close
// transactions stay short and the next close batch starts sooner. Only a
// close event is deferred: it is its order's last, so no later event of the
// order can be delivered before it.
func (s *Store) deferredType(ops []*op) any {
	closes := 0
	for _, o := range ops {
		if o.kind == opClose {
			closes += len(o.ids)
		}
	}
	if !fanout.Burst(s.w.Urgent(), closes) {
		return nil
	}
	return string(hourglass.EventFor(hourglass.StateClosed))
}

// queueFirst queues an order-first write (pay, transition, close).
func (s *Store) queueFirst(b *pgx.Batch, o *op, now any, st *batchState) {
	switch o.kind {
	case opExtend:
		p := o.extend
		var at any
		if !p.Deadline.IsZero() {
			at = hourglass.UnixMilli(p.Deadline)
		}
		b.Queue(extendSQL, now, o.id, at, p.By.Milliseconds(), p.Overdue, hourglass.MaxOrderLifetime.Milliseconds()).QueryRow(func(row pgx.Row) error {
			var atMs int64
			ord, err := scanOrder(row, &atMs)
			if errors.Is(err, pgx.ErrNoRows) {
				st.refused = append(st.refused, o)
				return nil
			}
			if err != nil {
				return err
			}
			o.order, o.extended = ord, true
			st.extended = append(st.extended, o)
			st.extendedEvent(ord, atMs)
			return nil
		})
	case opPay, opTransition:
		var q *pgx.QueuedQuery
		switch {
		case o.kind == opPay && o.late:
			q = b.Queue(payDueSQL, now, o.id, o.paymentID)
		case o.kind == opPay:
			q = b.Queue(paySQL, now, o.id, o.paymentID)
		default:
			q = b.Queue(transitionSQL, now, o.id, string(o.from), string(o.to))
		}
		q.QueryRow(func(row pgx.Row) error {
			var atMs int64
			ord, err := scanOrder(row, &atMs)
			if errors.Is(err, pgx.ErrNoRows) {
				st.refused = append(st.refused, o)
				return nil
			}
			if err != nil {
				return err
			}
			o.order = ord
			switch ord.Status {
			case hourglass.StatePaid:
				st.move(ord.Items, plan.Reserved, plan.Sold)
			case hourglass.StateCancelled:
				st.move(ord.Items, plan.Reserved, plan.Available)
			}
			st.event(ord.ID, ord.Status, atMs)
			return nil
		})
	case opClose:
		b.Queue(closeSQL, now, o.ids).Query(func(rows pgx.Rows) error {
			defer rows.Close()
			for rows.Next() {
				var (
					id, deadline, atMs int64
					raw                string
				)
				if err := rows.Scan(&id, &raw, &deadline, &atMs); err != nil {
					return err
				}
				items, err := stored.DecodeItems(raw)
				if err != nil {
					return fmt.Errorf("order %d: %w", id, err)
				}
				st.move(items, plan.Reserved, plan.Available)
				st.event(id, hourglass.StateClosed, atMs)
				o.closed = append(o.closed, hourglass.ClosedOrder{
					OrderID:  id,
					Deadline: hourglass.FromUnixMilli(deadline),
					ClosedAt: hourglass.FromUnixMilli(atMs),
				})
			}
			return rows.Err()
		})
	}
}

// queueLookUp reads a refused pay or transition's order to answer it, as
// the planner says: not found, a repeat of the payment that succeeded, or
// why it is refused.
func queueLookUp(b *pgx.Batch, o *op, now any) {
	b.Queue(lookUpSQL, now, o.id).QueryRow(func(row pgx.Row) error {
		var nowMs int64
		found, err := scanOrder(row, &nowMs)
		cur := &found
		if errors.Is(err, pgx.ErrNoRows) {
			cur = nil
		} else if err != nil {
			return err
		}
		at := hourglass.FromUnixMilli(nowMs)
		if o.kind == opExtend {
			var extend, repeat bool
			switch extend, repeat, _, o.err = plan.Extend(cur, o.extend, at); {
			case repeat:
				o.order = *cur
			case extend: // the compare-and-set refused it at an earlier now
				o.err = hourglass.Errorf(hourglass.CodeInvalidTransition, "cannot extend order %d: it is %s", o.id, cur.View(at).Status)
			}
			return nil
		}
		if o.kind == opPay {
			var pay, repeat bool
			decide := plan.Pay
			if o.late {
				decide = func(cur *hourglass.Order, id int64, paymentID string, _ time.Time) (bool, bool, error) {
					return plan.PayDue(cur, id, paymentID)
				}
			}
			switch pay, repeat, o.err = decide(cur, o.id, o.paymentID, at); {
			case repeat:
				o.order = *cur
			case pay: // the compare-and-set refused it at an earlier now
				o.err = hourglass.Errorf(hourglass.CodeOrderNotPayable, "order %d is %s", o.id, cur.Status)
			}
			return nil
		}
		if o.err = plan.Transition(cur, o.id, o.action, o.from, at); o.err == nil {
			o.err = hourglass.Errorf(hourglass.CodeInvalidTransition, "cannot %s order %d: it is %s", o.action, o.id, cur.Status)
		}
		return nil
	})
}

// createReads is what round trip 2 reads for the batch's creates.
type createReads struct {
	keys      map[string]plan.StoredKey
	policyRaw string
	products  plan.Stock
	now       int64
	ids       []int64
}

// queueCreateReads queues the reads (and locks) the creates need; extra are
// more SKUs to lock (those the order-first writes release or sell).
func (s *Store) queueCreateReads(b *pgx.Batch, creates []*op, extra []string, now any) *createReads {
	cr := &createReads{keys: map[string]plan.StoredKey{}, products: plan.Stock{}}
	var keys []string
	skuSet := make(map[string]struct{})
	for _, sku := range extra {
		skuSet[sku] = struct{}{}
	}
	for _, o := range creates {
		if o.create.IdempotencyKey != "" {
			keys = append(keys, o.create.IdempotencyKey)
		}
		for _, it := range o.create.Items {
			skuSet[it.SKU] = struct{}{}
		}
	}
	skus := make([]string, 0, len(skuSet))
	for sku := range skuSet {
		skus = append(skus, sku)
	}
	slices.Sort(skus)
	if len(keys) > 0 {
		// Every process takes a key's lock before reading it, and holds it
		// until its insert of the key committed: the read below sees the
		// winner of any race for the same key.
		b.Queue(idemLockSQL, idemLockClass, keys)
		b.Queue(idemReadSQL, keys).Query(func(rows pgx.Rows) error {
			defer rows.Close()
			for rows.Next() {
				var (
					key  string
					hash []byte
				)
				ord, err := scanOrder(rows, &key, &hash)
				if err != nil {
					return err
				}
				cr.keys[key] = plan.StoredKey{Hash: hash, OrderID: ord.ID, Order: &ord}
			}
			return rows.Err()
		})
	}
	b.Queue(policyReadSQL).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&cr.policyRaw)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	b.Queue(productsLockSQL, skus).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var (
				sku string
				p   plan.Product
			)
			if err := rows.Scan(&sku, &p.Category, &p.Available); err != nil {
				return err
			}
			cr.products[sku] = &p
		}
		return rows.Err()
	})
	// After the product locks: a create that waited for a hot SKU's row
	// takes the time it got it.
	b.Queue(nowSQL, now).QueryRow(func(row pgx.Row) error { return row.Scan(&cr.now) })
	b.Queue(idsSQL, s.orderSeq, len(creates)).Query(func(rows pgx.Rows) error {
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		cr.ids = ids
		return err
	})
	return cr
}

// decideCreates has the planner decide, in queue order, which creates the
// locked stock admits, and records their stock moves and events; it
// returns the admitted ones, whose order is set.
func (s *Store) decideCreates(cr *createReads, creates []*op, st *batchState) ([]*op, error) {
	admit := &plan.Admission{Now: hourglass.FromUnixMilli(cr.now), Stock: cr.products, Keys: cr.keys, Policy: func() (hourglass.Policy, error) {
		// Read in the transaction: a policy put through another store
		// value or process governs this order.
		return s.policy.Decode(cr.policyRaw)
	}}
	var accepted []*op
	for _, o := range creates {
		d, err := admit.Create(o.create)
		switch {
		case err != nil:
			return nil, err
		case d.Err != nil:
			o.err = d.Err
		case d.Replay != nil:
			o.order = *d.Replay.Order
		case d.SameAs >= 0:
			o.order = accepted[d.SameAs].order
		case len(accepted) >= len(cr.ids):
			return nil, fmt.Errorf("create orders: %d ids drawn for %d creates", len(cr.ids), len(creates))
		default:
			o.order, o.created = *d.Order, true
			o.order.ID = cr.ids[len(accepted)]
			accepted = append(accepted, o)
			st.event(o.order.ID, hourglass.StatePendingPayment, cr.now)
		}
	}
	for _, sku := range cr.products.Changed() {
		st.add(sku, cr.products[sku].Delta)
	}
	return accepted, nil
}

// createdPayloads returns the NOTIFY payloads announcing the admitted
// orders and the timers the batch armed (see cluster.go), or none when the
// store has no created-orders channel. AnnounceWithin is measured from an
// order's creation, and from a timer's arming.
func (s *Store) createdPayloads(accepted, armed, extended []*op) []string {
	if len(accepted)+len(armed)+len(extended) == 0 || s.createdChannel == "" {
		return []string{} // not looked up (a store that only migrates), or muted by a benchmark
	}
	n := len(accepted) + len(armed) + len(extended)
	ids, deadlines := make([]int64, 0, n), make([]int64, 0, n)
	within := s.cfg.AnnounceWithin
	for _, o := range accepted {
		if within > 0 && o.order.Deadline.Sub(o.order.CreatedAt) > within {
			continue // beyond every node's window: its owner's loader brings it
		}
		ids, deadlines = append(ids, o.order.ID), append(deadlines, hourglass.UnixMilli(o.order.Deadline))
	}
	for _, o := range armed {
		if within > 0 && o.timer.FireAt.Sub(o.timer.UpdatedAt) > within {
			continue
		}
		ids, deadlines = append(ids, o.timer.ID), append(deadlines, hourglass.UnixMilli(o.timer.FireAt))
	}
	// An extended order's new deadline: each node's loader takes it only
	// within its horizon (window.Loader.Offer).
	for _, o := range extended {
		ids, deadlines = append(ids, o.order.ID), append(deadlines, hourglass.UnixMilli(o.order.Deadline))
	}
	if len(ids) == 0 {
		return []string{}
	}
	return createdPayloads(s.origin, ids, deadlines)
}

// queueInsertOrders queues the insert of the admitted orders, their outbox
// timers and idempotency keys.
func queueInsertOrders(b *pgx.Batch, accepted []*op, nowMs int64, outbox bool) {
	n := len(accepted)
	ids, deadlines := make([]int64, n), make([]int64, n)
	users, items := make([]string, n), make([]string, n)
	var keys []string
	var hashes [][]byte
	var keyIDs []int64
	for i, o := range accepted {
		ids[i], deadlines[i] = o.order.ID, hourglass.UnixMilli(o.order.Deadline)
		users[i], items[i] = o.create.UserID, o.items
		if k := o.create.IdempotencyKey; k != "" {
			keys = append(keys, k)
			hashes = append(hashes, append([]byte{}, o.create.RequestHash...))
			keyIDs = append(keyIDs, o.order.ID)
		}
	}
	b.Queue(insertOrdersSQL, nowMs, ids, users, items, deadlines, outbox, keys, hashes, keyIDs)
}

// queueOutboxMoves queues the outbox rows of the extended orders' new
// deadlines (a broker mechanism publishes them; the old timer's close is a
// no-op).
func queueOutboxMoves(b *pgx.Batch, extended []*op) {
	ids, deadlines := make([]int64, len(extended)), make([]int64, len(extended))
	for i, o := range extended {
		ids[i], deadlines[i] = o.order.ID, hourglass.UnixMilli(o.order.Deadline)
	}
	b.Queue(`INSERT INTO timer_outbox (order_id, deadline) SELECT * FROM unnest($1::bigint[], $2::bigint[])
ON CONFLICT (order_id) DO UPDATE SET deadline = excluded.deadline`, ids, deadlines)
}

// Due implements writer.Announcer: what a committed create, pay, cancel,
// arm or timer cancel changed in what is due (announced to the engine by
// the writer, hourglass.DueFeed).
func (o *op) Due(u *hourglass.DueUpdate) {
	switch o.kind {
	case opCreate:
		if o.created {
			u.Due = append(u.Due, hourglass.DueItem{ID: o.order.ID, At: o.order.Deadline})
		}
	case opPay:
		u.Gone = append(u.Gone, o.id)
	case opExtend:
		if o.extended {
			u.Due = append(u.Due, hourglass.DueItem{ID: o.order.ID, At: o.order.Deadline})
		}
	case opTransition:
		if o.action == hourglass.ActionCancel {
			u.Gone = append(u.Gone, o.id)
		}
	case opArmTimer:
		if o.timer.Status == hourglass.TimerScheduled {
			u.Due = append(u.Due, hourglass.DueItem{ID: o.timer.ID, At: o.timer.FireAt})
		}
	case opCancelTimer:
		u.Gone = append(u.Gone, o.timer.ID)
	}
}
