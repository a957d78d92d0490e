package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/writer"
)

// Group commit of order writes.
//
// CreateOrder, PayOrder, TransitionOrder and CloseOrders queue an op and
// wait, as do ArmTimer, CancelTimer and FireTimers (their part of each step
// is described in timerbatch.go). writersDefault writer goroutines each
// take up to MaxBatch ops (closes and fires first: a burst of creates must
// not make a deadline late) and run them in one transaction:
//
//  1. read the idempotency keys the batch's creates carry (a key that
//     another process commits meanwhile makes its insert in step 6 fail
//     with a duplicate key, and the batch runs again and finds it);
//  2. lock the orders the batch pays, cancels, ships, completes or closes:
//     SELECT … WHERE id IN (…) ORDER BY id FOR UPDATE;
//  3. lock the products those pending orders and the creates touch, in SKU
//     order: SELECT … WHERE sku IN (…) ORDER BY sku FOR UPDATE. Every batch
//     of every process locks orders by id, then products by SKU, so batches
//     cannot deadlock on these rows;
//  4. read now (the server's clock, after the locks are held), the policy
//     and whether any webhook subscription exists, in one statement;
//  5. decide every op in queue order in Go on the locked rows: a hot SKU's
//     stock is checked and moved in memory for each of the batch's orders,
//     and a refused op (insufficient stock, not payable, …) writes nothing
//     and fails alone;
//  6. write: one multi-row INSERT of the new orders; the changed orders and
//     products, each row written once per batch (a hot SKU's row once,
//     however many orders moved it) with one UPDATE … WHERE key IN (…) per
//     distinct change, or one multi-row upsert when the changes are many
//     and varied; one INSERT of the events; when subscriptions exist, one
//     INSERT … SELECT fanning them out to the webhooks subscribed now; the
//     outbox timers and the idempotency keys; last, one order_feed row
//     of the created orders (cluster.go);
//  7. record the webhook delivery attempts the batch carries (attempts.go:
//     they come in the low lane, into room the other writes leave);
//  8. commit.
//
// In a burst (more closes queued behind a batch that closes orders), the
// batch's order.closed events get one fanout_pending row instead of their
// deliveries (fanout.go), so close transactions stay short.
//
// Step 5 is the planner's (store/internal/plan). Retries (retryPolicy),
// the bisection of a batch a broken write failed and the handling of a lost
// connection or an unknown outcome are the writer's (store/internal/writer).

type opKind int

const (
	opCreate opKind = iota
	opPay
	opTransition
	opClose
	opExtend // ExtendOrder, decided like a pay on the locked row
	opArm    // a named timer's ArmTimer (timerbatch.go)
	opCancel // CancelTimer
	opFire   // FireTimers
	// A webhook delivery attempt's outcome (attempts.go), in the low lane.
	opAttempt
)

// op is one order write waiting for a writer; res is its answer once its
// Submit returned.
type op struct {
	kind      opKind
	create    hourglass.CreateOrderParams // opCreate
	items     string                      // opCreate: encoded items
	id        int64                       // opPay, opTransition, opExtend
	paymentID string                      // opPay
	late      bool                        // opPay: PayDueOrder (no deadline check)
	extend    hourglass.ExtendOrderParams // opExtend
	action    hourglass.Action            // opTransition
	ids       []int64                     // opClose; opFire (timer ids, ascending, distinct)
	arm       hourglass.ArmTimerParams    // opArm
	key       string                      // opCancel
	attempt   hourglass.AttemptResult     // opAttempt
	res       opResult
}

func (o *op) Fail(err error) { o.res = opResult{err: err} }
func (o *op) Err() error     { return o.res.err }

// urgent reports whether o jumps the queue of API writes: a close or a
// fire, whose lateness is what hourglass is measured by.
func (o *op) urgent() bool { return o.kind == opClose || o.kind == opFire }

type opResult struct {
	order    hourglass.Order
	created  bool
	extended bool  // opExtend: the deadline moved (not a repeat)
	replay   int64 // an idempotent replay: the answer is the stored order with this id
	closed   []hourglass.ClosedOrder
	timer    hourglass.Timer         // opArm, opCancel
	fired    []hourglass.FiredTimer  // opFire
	record   hourglass.AttemptRecord // opAttempt
	err      error
}

// submit queues o and waits for its result: closes and fires urgent,
// attempts low (only into room closes and API writes leave). Once queued,
// an op runs even if its ctx ends while it waits, unless its batch has not
// begun when ctx ends: then it is skipped and ctx.Err() returned.
func (s *Store) submit(ctx context.Context, o *op) opResult {
	lane := writer.Normal
	if o.kind == opAttempt {
		lane = writer.Low
	} else if o.urgent() {
		lane = writer.Urgent
	}
	if err := s.w.Submit(ctx, lane, o); err != nil {
		return opResult{err: err}
	}
	return o.res
}

// retryPolicy is MySQL's: a batch or transaction that lost a race (a
// deadlock, a lock wait timeout, a racing duplicate key, a Galera
// certification conflict: retryReason) runs again after backoff, at most
// 16 attempts. On Galera a hot row written from several nodes at once
// loses certification often (one node wins each round), hence more than a
// single server needs, and the randomised backoff keeps two nodes from
// retrying in step.
func retryPolicy() writer.RetryPolicy {
	return writer.RetryPolicy{Attempts: retries, Backoff: backoff, Timeout: batchTimeout}
}

// dialect is the store as the group-commit writer sees it.
type dialect struct{ *Store }

// Run runs ops in one transaction (runBatch) and hands each its result.
func (d dialect) Run(ctx context.Context, ops []*op) (int, error) {
	results, fanned, err := d.runBatch(ctx, ops)
	if err != nil {
		return 0, fmt.Errorf("mysql: order write: %w", err)
	}
	for i, o := range ops {
		o.res = results[i]
	}
	return fanned, nil
}

// Classify implements writer.Dialect.
func (d dialect) Classify(err error) writer.Class { return d.classify(err) }

// lockedOrder is an order row locked by the batch, changed in memory.
type lockedOrder struct {
	o     hourglass.Order
	dirty bool
}

// newOrder is an order the batch inserts.
type newOrder struct {
	o     hourglass.Order
	items string
	key   string
	hash  []byte
}

// batchEvent is an event the batch writes: of a new order (newIdx >= 0)
// or of a locked one.
type batchEvent struct {
	typ     hourglass.EventType
	newIdx  int
	orderID int64
	// Of a timer.fired event: its id and body, written with it, and the
	// webhook it goes to alone (0: to the subscribed ones).
	id        string
	body      []byte
	webhookID int64
	seq       int64 // once inserted
}

// batch is one attempt of a batch's transaction: what it locked and read
// (steps 1 to 4), what it decided (step 5) and writes (steps 6 and 7).
type batch struct {
	s       *Store
	ops     []*op
	results []opResult
	tx      *sql.Tx

	keys       []any   // the creates' idempotency keys
	orderIDs   []int64 // the orders paid, transitioned or closed, ascending once locked
	timerKeys  []string
	timerIDs   []int64
	webhookIDs []int64 // named by arms

	stored    map[string]plan.StoredKey
	orders    map[int64]*lockedOrder
	skus      []string // locked, ascending
	stock     plan.Stock
	timers    *batchTimers
	nowMs     int64
	now       time.Time
	rawPolicy sql.NullString
	increment int64 // @@auto_increment_increment
	webhooks  bool  // any subscription exists: fan out

	extended []*lockedOrder // orders whose deadline the batch moved, in decision order
	news     []newOrder
	newOf    []int          // index into news of a create's order, else -1
	sameAs   []int          // a create answered by an earlier create of the batch (its news index), else -1
	timerOf  []*lockedTimer // the timer an arm's or cancel's result names
	events   []batchEvent
}

// runBatch runs ops in one transaction (the steps above). It returns the
// results and how many deliveries it created; an error means nothing
// committed, unless it is marked writer.OutcomeUnknown or a lost
// connection.
func (s *Store) runBatch(ctx context.Context, ops []*op) (results []opResult, fanned int, err error) {
	b := &batch{s: s, ops: ops, results: make([]opResult, len(ops)), timers: &batchTimers{}}
	b.collect()
	if b.tx, err = s.db.BeginTx(ctx, nil); err != nil {
		return nil, 0, err
	}
	committed := false
	defer func() {
		if !committed {
			b.tx.Rollback()
		}
	}()
	if err := b.lock(ctx); err != nil {
		return nil, 0, err
	}
	if err := b.decide(); err != nil {
		return nil, 0, err
	}
	fanned, deferred, err := b.write(ctx)
	if err != nil {
		return nil, 0, err
	}
	// 8. Commit.
	if err := b.tx.Commit(); err != nil {
		committed = true // nothing left to roll back
		if retryReason(err, false) != "" {
			return nil, 0, err // rolled back (a deadlock or Galera's certification)
		}
		return nil, 0, writer.OutcomeUnknown(err)
	}
	committed = true
	if deferred {
		s.fanOut.Wake()
	}
	b.answer()
	return b.results, fanned, nil
}

// collect lists the rows the batch's ops name.
func (b *batch) collect() {
	for _, o := range b.ops {
		switch o.kind {
		case opCreate:
			if o.create.IdempotencyKey != "" {
				b.keys = append(b.keys, []byte(o.create.IdempotencyKey))
			}
		case opPay, opTransition, opExtend:
			b.orderIDs = append(b.orderIDs, o.id)
		case opClose:
			b.orderIDs = append(b.orderIDs, o.ids...)
		case opArm:
			b.timerKeys = append(b.timerKeys, o.arm.Key)
			if o.arm.WebhookID != 0 {
				b.webhookIDs = append(b.webhookIDs, o.arm.WebhookID)
			}
		case opCancel:
			b.timerKeys = append(b.timerKeys, o.key)
		case opFire:
			b.timerIDs = append(b.timerIDs, o.ids...)
		}
	}
}

// anys returns xs as arguments.
func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// lock runs steps 1 to 4: the stored idempotency keys, the orders by id,
// the products by SKU, the timers, then now and the policy.
func (b *batch) lock(ctx context.Context) error {
	b.stored = map[string]plan.StoredKey{}
	if len(b.keys) > 0 {
		if err := eachRow(ctx, b.tx, `SELECT idem_key, request_hash, order_id FROM idempotency_keys WHERE idem_key IN (…)`, b.keys, func(rows *sql.Rows) error {
			var (
				k   []byte
				key plan.StoredKey
			)
			err := rows.Scan(&k, &key.Hash, &key.OrderID)
			b.stored[string(k)] = key
			return err
		}); err != nil {
			return fmt.Errorf("read idempotency keys: %w", err)
		}
	}
	b.orders = map[int64]*lockedOrder{}
	if len(b.orderIDs) > 0 {
		slices.Sort(b.orderIDs)
		b.orderIDs = slices.Compact(b.orderIDs)
		if err := eachRow(ctx, b.tx, `SELECT `+orderColumns+` FROM orders WHERE id IN (…) ORDER BY id FOR UPDATE`, anys(b.orderIDs), func(rows *sql.Rows) error {
			o, err := scanOrder(rows)
			b.orders[o.ID] = &lockedOrder{o: o}
			return err
		}); err != nil {
			return fmt.Errorf("lock orders: %w", err)
		}
	}
	// The products the creates (not their replays) and the pending locked
	// orders touch: every batch of every process locks orders by id, then
	// products by SKU, so batches cannot deadlock on these rows.
	for _, o := range b.ops {
		if o.kind == opCreate {
			if k, ok := b.stored[o.create.IdempotencyKey]; ok && o.create.IdempotencyKey != "" && k.OrderID != 0 {
				continue // a replay reserves nothing
			}
			for _, it := range o.create.Items {
				b.skus = append(b.skus, it.SKU)
			}
		}
	}
	for _, lo := range b.orders {
		if lo.o.Status == hourglass.StatePendingPayment {
			for _, it := range lo.o.Items {
				b.skus = append(b.skus, it.SKU)
			}
		}
	}
	b.stock = plan.Stock{}
	if len(b.skus) > 0 {
		slices.Sort(b.skus) // byte order: the order of the ascii_bin primary key
		b.skus = slices.Compact(b.skus)
		if err := eachRow(ctx, b.tx, `SELECT sku, category, available, reserved, sold FROM products WHERE sku IN (…) ORDER BY sku FOR UPDATE`, anys(b.skus), func(rows *sql.Rows) error {
			var (
				sku string
				p   plan.Product
			)
			err := rows.Scan(&sku, &p.Category, &p.Available, &p.Reserved, &p.Sold)
			b.stock[sku] = &p
			return err
		}); err != nil {
			return fmt.Errorf("lock products: %w", err)
		}
	}
	// Then the timers: by key, then by id (timerbatch.go).
	if len(b.timerKeys) > 0 || len(b.timerIDs) > 0 {
		var err error
		if b.timers, err = lockTimers(ctx, b.tx, b.timerKeys, b.timerIDs, b.webhookIDs); err != nil {
			return err
		}
	}
	// Now, read with the locks held, and the policy.
	if err := b.tx.QueryRowContext(ctx, `SELECT `+nowExpr+`, (SELECT value FROM settings WHERE name = 'policy'), @@auto_increment_increment,
	EXISTS (SELECT 1 FROM webhook_subscriptions)`,
		b.s.nowArg()).Scan(&b.nowMs, &b.rawPolicy, &b.increment, &b.webhooks); err != nil {
		return fmt.Errorf("read now and policy: %w", err)
	}
	b.now = hourglass.FromUnixMilli(b.nowMs)
	return nil
}

// decide runs step 5: each op in queue order, on the locked rows, by the
// planner (store/internal/plan).
func (b *batch) decide() error {
	b.newOf, b.sameAs, b.timerOf = make([]int, len(b.ops)), make([]int, len(b.ops)), make([]*lockedTimer, len(b.ops))
	admit := &plan.Admission{Now: b.now, Stock: b.stock, Keys: b.stored, Policy: func() (hourglass.Policy, error) {
		return b.s.policy.Decode(b.rawPolicy.String)
	}}
	for i, o := range b.ops {
		b.newOf[i], b.sameAs[i] = -1, -1
		r := &b.results[i]
		var err error
		switch o.kind {
		case opCreate:
			err = b.create(i, admit)
		case opPay:
			lo := b.orders[o.id]
			var pay, repeat bool
			if o.late {
				pay, repeat, r.err = plan.PayDue(lockedRow(lo), o.id, o.paymentID)
			} else {
				pay, repeat, r.err = plan.Pay(lockedRow(lo), o.id, o.paymentID, b.now)
			}
			if pay {
				cur := &lo.o
				err = b.stock.Move(cur.Items, plan.Reserved, plan.Sold)
				cur.Status, cur.PaidAt, cur.PaymentID = hourglass.StatePaid, b.now, o.paymentID
				b.changed(lo, hourglass.EventOrderPaid)
			}
			if pay || repeat {
				r.order = cloneOrder(lo.o)
			}
		case opExtend:
			lo := b.orders[o.id]
			extend, repeat, target, err := plan.Extend(lockedRow(lo), o.extend, b.now)
			if r.err = err; extend {
				lo.o.Deadline = target
				b.extended = append(b.extended, lo)
				// The body is the snapshot now: the deadline it set must
				// survive a later extension (hourglass.Order.AsOf).
				id := hourglass.NewEventID()
				b.events = append(b.events, batchEvent{typ: hourglass.EventOrderExtended, newIdx: -1, orderID: lo.o.ID, id: id,
					body: sqlq.RenderEvent(id, hourglass.EventOrderExtended, b.nowMs, lo.o)})
				r.extended = true
			}
			if extend || repeat {
				r.order = cloneOrder(lo.o)
			}
		case opTransition:
			var from, to hourglass.State
			if from, to, r.err = plan.Action(o.action); r.err != nil {
				continue
			}
			lo := b.orders[o.id]
			if r.err = plan.Transition(lockedRow(lo), o.id, o.action, from, b.now); r.err != nil {
				continue
			}
			if to == hourglass.StateCancelled {
				err = b.stock.Move(lo.o.Items, plan.Reserved, plan.Available)
			}
			lo.o.Status = to
			b.changed(lo, hourglass.EventFor(to))
			r.order = cloneOrder(lo.o)
		case opClose:
			for _, id := range o.ids {
				lo := b.orders[id]
				if !plan.Closes(lockedRow(lo), b.now) {
					continue
				}
				cur := &lo.o
				if err = b.stock.Move(cur.Items, plan.Reserved, plan.Available); err != nil {
					break
				}
				cur.Status, cur.ClosedAt, cur.CloseReason = hourglass.StateClosed, b.now, hourglass.CloseReasonTimeout
				b.changed(lo, hourglass.EventOrderClosed)
				r.closed = append(r.closed, hourglass.ClosedOrder{OrderID: id, Deadline: cur.Deadline, ClosedAt: b.now})
			}
		case opArm:
			b.timerOf[i], *r = b.timers.arm(o.arm, b.nowMs)
		case opCancel:
			b.timerOf[i], *r = b.timers.cancel(o.key, b.now)
		case opFire:
			var evs []batchEvent
			r.fired, evs, err = b.timers.fire(o.ids, b.now)
			b.events = append(b.events, evs...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// lockedRow is a locked order's row, or nil when there is none.
func lockedRow(lo *lockedOrder) *hourglass.Order {
	if lo == nil {
		return nil
	}
	return &lo.o
}

// changed marks a locked order written, with its event.
func (b *batch) changed(lo *lockedOrder, typ hourglass.EventType) {
	lo.dirty = true
	b.events = append(b.events, batchEvent{typ: typ, newIdx: -1, orderID: lo.o.ID})
}

// create decides the create of op i.
func (b *batch) create(i int, admit *plan.Admission) error {
	o, r := b.ops[i], &b.results[i]
	d, err := admit.Create(o.create)
	switch {
	case err != nil:
		return err
	case d.Err != nil:
		r.err = d.Err
	case d.Replay != nil:
		r.replay = d.Replay.OrderID
	case d.SameAs >= 0:
		b.sameAs[i] = d.SameAs
	default:
		b.newOf[i] = len(b.news)
		b.events = append(b.events, batchEvent{typ: hourglass.EventOrderCreated, newIdx: len(b.news)})
		b.news = append(b.news, newOrder{o: *d.Order, items: o.items, key: o.create.IdempotencyKey, hash: o.create.RequestHash})
	}
	return nil
}

// write runs steps 6 and 7: the new orders, the changed orders and
// products, the timers, the events and their deliveries (or their deferral,
// reported by deferred), the attempts, the outbox, the idempotency keys and
// last the order feed.
func (b *batch) write(ctx context.Context) (fanned int, deferred bool, err error) {
	tx := b.tx
	if err := b.insertOrders(ctx); err != nil {
		return 0, false, err
	}
	var dirty []*lockedOrder
	for _, id := range b.orderIDs {
		if lo := b.orders[id]; lo != nil && lo.dirty {
			dirty = append(dirty, lo)
		}
	}
	if err := updateOrders(ctx, tx, dirty); err != nil {
		return 0, false, err
	}
	// Extensions are rare: one UPDATE each (updateOrders groups by the
	// fields transitions set, which a batch of closes shares).
	for _, lo := range b.extended {
		if _, err := tx.ExecContext(ctx, `UPDATE orders SET deadline = ? WHERE id = ?`, hourglass.UnixMilli(lo.o.Deadline), lo.o.ID); err != nil {
			return 0, false, fmt.Errorf("extend order %d: %w", lo.o.ID, err)
		}
	}
	if err := updateProducts(ctx, tx, b.stock); err != nil {
		return 0, false, err
	}
	if err := b.timers.write(ctx, tx, b.nowMs, b.increment); err != nil {
		return 0, false, err
	}
	if err := b.insertEvents(ctx); err != nil {
		return 0, false, err
	}
	if len(b.events) > 0 {
		if b.webhooks && b.s.deferFanOut(b.ops) {
			if b.events, err = deferClosed(ctx, tx, b.events); err != nil {
				return 0, false, err
			}
			deferred = true
		}
		// To the webhooks subscribed now (or the one a timer names), read
		// with a shared lock so that a webhook deleted concurrently waits
		// for this commit and then deletes its deliveries too.
		if fanned, err = fanOut(ctx, tx, b.events, b.nowMs, b.webhooks); err != nil {
			return 0, false, err
		}
	}
	if err := recordAttempts(ctx, tx, b.ops, b.results, b.nowMs); err != nil {
		return 0, false, err
	}
	// The deadlines the batch schedules: its created orders', then its
	// armed timers'.
	due := make([]hourglass.DueItem, 0, len(b.news))
	for _, n := range b.news {
		due = append(due, hourglass.DueItem{ID: n.o.ID, At: n.o.Deadline})
	}
	due = append(due, b.timers.announced()...)
	for _, lo := range b.extended {
		if lo.o.Status == hourglass.StatePendingPayment { // not paid or closed later in the batch
			due = append(due, hourglass.DueItem{ID: lo.o.ID, At: lo.o.Deadline})
		}
	}
	if b.s.cfg.Outbox && len(due) > 0 {
		args := make([]any, 0, 2*len(due))
		for _, t := range due {
			args = append(args, t.ID, hourglass.UnixMilli(t.At))
		}
		// A re-armed timer may still have its row: it moves.
		if _, err := tx.ExecContext(ctx, `INSERT INTO timer_outbox (order_id, deadline) VALUES `+rowsOf(len(due), `(?, ?)`)+`
ON DUPLICATE KEY UPDATE deadline = VALUES(deadline)`, args...); err != nil {
			return 0, false, fmt.Errorf("insert outbox timers: %w", err)
		}
	}
	var keyArgs []any
	for _, n := range b.news {
		if n.key != "" {
			keyArgs = append(keyArgs, []byte(n.key), nonNilBytes(n.hash), n.o.ID, b.nowMs)
		}
	}
	if len(keyArgs) > 0 {
		// A key committed by another process since step 1 fails here with a
		// duplicate key (1062): the batch runs again and replays it.
		if _, err := tx.ExecContext(ctx, `INSERT INTO idempotency_keys (idem_key, request_hash, order_id, created_at) VALUES `+
			rowsOf(len(keyArgs)/4, `(?, ?, ?, ?)`), keyArgs...); err != nil {
			return 0, false, fmt.Errorf("insert idempotency keys: %w", err)
		}
	}
	// Last, so that its seq, handed out now, becomes visible soon after:
	// the feed of the other processes' WatchCreated (cluster.go).
	if len(due) > 0 {
		if err := b.s.writeFeed(ctx, tx, b.now, due); err != nil {
			return 0, false, err
		}
	}
	return fanned, deferred, nil
}

// insertOrders inserts the new orders with one multi-row INSERT and sets
// their ids.
func (b *batch) insertOrders(ctx context.Context) error {
	if len(b.news) == 0 {
		return nil
	}
	args := make([]any, 0, 4*len(b.news))
	for _, n := range b.news {
		args = append(args, n.o.UserID, n.items, b.nowMs, hourglass.UnixMilli(n.o.Deadline))
	}
	res, err := b.tx.ExecContext(ctx, `INSERT INTO orders (user_id, status, items, created_at, deadline) VALUES `+
		rowsOf(len(b.news), `(?, 'pending_payment', ?, ?, ?)`), args...)
	if err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	// A multi-row INSERT … VALUES knows its row count, so InnoDB hands it
	// consecutive ids (step auto_increment_increment) in every
	// innodb_autoinc_lock_mode; LAST_INSERT_ID is the first.
	first, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(b.news)) {
		return fmt.Errorf("insert orders: %d rows inserted, want %d (%v)", n, len(b.news), err)
	}
	for j := range b.news {
		b.news[j].o.ID = first + int64(j)*b.increment
	}
	return nil
}

// insertEvents inserts the batch's events with one multi-row INSERT, or
// several when timer.fired bodies make it long (statementRuns), and sets
// their seqs.
func (b *batch) insertEvents(ctx context.Context) error {
	events := b.events
	for _, run := range statementRuns(len(events), func(j int) int { return 2 * len(events[j].body) }) {
		part := events[run[0]:run[1]]
		// Orders' events have no body: a batch without timer.fired events
		// leaves the column out.
		withBody := slices.ContainsFunc(part, func(e batchEvent) bool { return e.body != nil })
		args := make([]any, 0, 5*len(part))
		for _, e := range part {
			id := e.orderID
			if e.newIdx >= 0 {
				id = b.news[e.newIdx].o.ID
			}
			evID := e.id
			if evID == "" {
				evID = hourglass.NewEventID()
			}
			args = append(args, evID, string(e.typ), id, b.nowMs)
			if withBody {
				args = append(args, nullBytes(e.body))
			}
		}
		query := `INSERT INTO events (id, type, order_id, created_at) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?)`)
		if withBody {
			query = `INSERT INTO events (id, type, order_id, created_at, body) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?, ?)`)
		}
		res, err := b.tx.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
		first, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
		for j := range part {
			part[j].seq = first + int64(j)*b.increment
		}
	}
	return nil
}

// answer completes the results once the batch committed: the new orders'
// ids, and the timers it created.
func (b *batch) answer() {
	for i := range b.ops {
		if j := b.newOf[i]; j >= 0 {
			b.results[i].order, b.results[i].created = cloneOrder(b.news[j].o), true
		}
		if j := b.sameAs[i]; j >= 0 {
			b.results[i].order = cloneOrder(b.news[j].o)
		}
		if lt := b.timerOf[i]; lt != nil && b.results[i].timer.ID == 0 {
			b.results[i].timer.ID = lt.t.ID // created by this batch
		}
	}
}

// maxGroups is the most UPDATE … WHERE key IN (…) statements a batch
// sends for one table before it writes the rows with one upsert instead. A
// batch of creates usually moves every SKU by the same quantity (one
// group), a batch of closes sets every order to the same values: a plain
// UPDATE of a key list is cheaper for InnoDB than an upsert, which first
// tries each row as an insert.
const maxGroups = 2

// updateOrders writes the changed orders' status and timestamps: one UPDATE
// per distinct set of values if there are at most maxGroups, else one
// upsert whose rows all exist (they are locked), so each is an update.
// VALUES() is understood by MariaDB and MySQL 8 (where it is deprecated in
// favour of a row alias MariaDB lacks).
func updateOrders(ctx context.Context, tx *sql.Tx, dirty []*lockedOrder) error {
	if len(dirty) == 0 {
		return nil
	}
	type shape struct {
		status                 hourglass.State
		paidAt, closedAt       int64
		closeReason, paymentID string
	}
	groups := map[shape][]any{}
	var order []shape
	for _, lo := range dirty {
		o := lo.o
		k := shape{o.Status, hourglass.UnixMilli(o.PaidAt), hourglass.UnixMilli(o.ClosedAt), o.CloseReason, o.PaymentID}
		if o.PaidAt.IsZero() {
			k.paidAt = 0
		}
		if o.ClosedAt.IsZero() {
			k.closedAt = 0
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], o.ID)
	}
	if len(groups) <= maxGroups {
		for _, k := range order {
			ids := groups[k]
			args := append([]any{string(k.status), nullMsOf(k.paidAt), nullMsOf(k.closedAt), nullString(k.closeReason), nullString(k.paymentID)}, ids...)
			if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = ?, paid_at = ?, closed_at = ?, close_reason = ?, payment_id = ?
WHERE id IN (`+placeholders(len(ids))+`)`, args...); err != nil {
				return fmt.Errorf("update orders: %w", err)
			}
		}
		return nil
	}
	args := make([]any, 0, 6*len(dirty))
	for _, lo := range dirty {
		o := lo.o
		args = append(args, o.ID, string(o.Status), nullMs(o.PaidAt), nullMs(o.ClosedAt), nullString(o.CloseReason), nullString(o.PaymentID))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, user_id, status, items, created_at, deadline, paid_at, closed_at, close_reason, payment_id) VALUES `+
		rowsOf(len(dirty), `(?, '', ?, '', 0, 0, ?, ?, ?, ?)`)+`
ON DUPLICATE KEY UPDATE status = VALUES(status), paid_at = VALUES(paid_at), closed_at = VALUES(closed_at),
	close_reason = VALUES(close_reason), payment_id = VALUES(payment_id)`, args...); err != nil {
		return fmt.Errorf("update orders: %w", err)
	}
	return nil
}

// updateProducts writes the changed products' stock: the rows are locked,
// so the values computed from them are current. One UPDATE per distinct
// change (a hot SKU's row is written once however many orders moved it),
// or one upsert of the new values when there are more than maxGroups.
func updateProducts(ctx context.Context, tx *sql.Tx, stock plan.Stock) error {
	skus := stock.Changed()
	if len(skus) == 0 {
		return nil
	}
	groups := map[[3]int64][]any{}
	var order [][3]int64
	for _, sku := range skus {
		d := stock[sku].Delta
		if _, ok := groups[d]; !ok {
			order = append(order, d)
		}
		groups[d] = append(groups[d], sku)
	}
	if len(groups) <= maxGroups {
		for _, d := range order {
			list := groups[d]
			args := append([]any{d[0], d[1], d[2]}, list...)
			if _, err := tx.ExecContext(ctx, `UPDATE products SET available = available + ?, reserved = reserved + ?, sold = sold + ?
WHERE sku IN (`+placeholders(len(list))+`)`, args...); err != nil {
				return fmt.Errorf("update products: %w", err)
			}
		}
		return nil
	}
	args := make([]any, 0, 4*len(skus))
	for _, sku := range skus {
		p := stock[sku]
		args = append(args, sku, p.Available, p.Reserved, p.Sold)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO products (sku, name, category, available, reserved, sold) VALUES `+
		rowsOf(len(skus), `(?, '', '', ?, ?, ?)`)+`
ON DUPLICATE KEY UPDATE available = VALUES(available), reserved = VALUES(reserved), sold = VALUES(sold)`, args...); err != nil {
		return fmt.Errorf("update products: %w", err)
	}
	return nil
}

func nullMsOf(ms int64) any {
	if ms == 0 {
		return nil
	}
	return ms
}

// rowsOf returns n copies of row joined by ", ".
func rowsOf(n int, row string) string {
	var b strings.Builder
	b.Grow(n * (len(row) + 2))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

func nullMs(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return hourglass.UnixMilli(t)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func cloneOrder(o hourglass.Order) hourglass.Order {
	o.Items = slices.Clone(o.Items)
	return o
}

// Due implements writer.Announcer: what a committed create, pay, cancel,
// arm or timer cancel changed in what is due (announced to the engine by
// the writer, hourglass.DueFeed). An idempotent replay changes nothing.
func (o *op) Due(u *hourglass.DueUpdate) {
	r := &o.res
	switch o.kind {
	case opCreate:
		if r.created && r.replay == 0 {
			u.Due = append(u.Due, hourglass.DueItem{ID: r.order.ID, At: r.order.Deadline})
		}
	case opPay:
		u.Gone = append(u.Gone, o.id)
	case opExtend:
		if r.extended {
			u.Due = append(u.Due, hourglass.DueItem{ID: r.order.ID, At: r.order.Deadline})
		}
	case opTransition:
		if o.action == hourglass.ActionCancel {
			u.Gone = append(u.Gone, o.id)
		}
	case opArm:
		if r.timer.Status == hourglass.TimerScheduled {
			u.Due = append(u.Due, hourglass.DueItem{ID: r.timer.ID, At: r.timer.FireAt})
		}
	case opCancel:
		u.Gone = append(u.Gone, r.timer.ID)
	}
}
