package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
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
// A deadlock, lock wait timeout or racing duplicate key rolls the batch
// back and runs it again (bounded). Any other error rolls it back and
// bisects it (see commit), so one broken write cannot fail its peers. A lost
// connection, or a commit whose outcome is unknown, fails every op of its
// transaction with unavailable and runs nothing again.

type opKind int

const (
	opCreate opKind = iota
	opPay
	opTransition
	opClose
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
	id        int64                       // opPay, opTransition
	paymentID string                      // opPay
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
	order   hourglass.Order
	created bool
	replay  int64 // an idempotent replay: the answer is the stored order with this id
	closed  []hourglass.ClosedOrder
	timer   hourglass.NamedTimer    // opArm, opCancel
	fired   []hourglass.FiredTimer  // opFire
	record  hourglass.AttemptRecord // opAttempt
	err     error
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

// lockedProduct is a product row locked by the batch, changed in memory.
type lockedProduct struct {
	category                  string
	available, reserved, sold int64
	read                      [3]int64 // available, reserved, sold as locked
	dirty                     bool
}

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

type storedKey struct {
	hash    []byte
	orderID int64
}

// runBatch runs ops in one transaction (the steps above). It returns the
// results and how many deliveries it created; an error means nothing
// committed, unless it is marked writer.OutcomeUnknown or a lost
// connection.
func (s *Store) runBatch(ctx context.Context, ops []*op) (results []opResult, fanned int, err error) {
	results = make([]opResult, len(ops))
	live := make([]bool, len(ops))
	var (
		keys       []any
		orderIDs   []int64
		timerKeys  []string
		timerIDs   []int64
		webhookIDs []int64 // named by arms
	)
	for i, o := range ops {
		live[i] = true
		switch o.kind {
		case opCreate:
			if o.create.IdempotencyKey != "" {
				keys = append(keys, []byte(o.create.IdempotencyKey))
			}
		case opPay, opTransition:
			orderIDs = append(orderIDs, o.id)
		case opClose:
			orderIDs = append(orderIDs, o.ids...)
		case opArm:
			timerKeys = append(timerKeys, o.arm.Key)
			if o.arm.WebhookID != 0 {
				webhookIDs = append(webhookIDs, o.arm.WebhookID)
			}
		case opCancel:
			timerKeys = append(timerKeys, o.key)
		case opFire:
			timerIDs = append(timerIDs, o.ids...)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, err
	}
	committed := false
	defer func() {
		if !committed {
			tx.Rollback()
		}
	}()

	// 1. Idempotency keys already stored.
	stored := map[string]storedKey{}
	if len(keys) > 0 {
		rows, err := tx.QueryContext(ctx, `SELECT idem_key, request_hash, order_id FROM idempotency_keys WHERE idem_key IN (`+placeholders(len(keys))+`)`, keys...)
		if err != nil {
			return nil, 0, fmt.Errorf("read idempotency keys: %w", err)
		}
		for rows.Next() {
			var (
				k, h []byte
				id   int64
			)
			if err := rows.Scan(&k, &h, &id); err != nil {
				rows.Close()
				return nil, 0, fmt.Errorf("read idempotency keys: %w", err)
			}
			stored[string(k)] = storedKey{hash: h, orderID: id}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, 0, fmt.Errorf("read idempotency keys: %w", err)
		}
	}

	// 2. Lock the orders, by id.
	orders := map[int64]*lockedOrder{}
	if len(orderIDs) > 0 {
		slices.Sort(orderIDs)
		orderIDs = slices.Compact(orderIDs)
		args := make([]any, len(orderIDs))
		for i, id := range orderIDs {
			args[i] = id
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+orderColumns+` FROM orders WHERE id IN (`+placeholders(len(args))+`) ORDER BY id FOR UPDATE`, args...)
		if err != nil {
			return nil, 0, fmt.Errorf("lock orders: %w", err)
		}
		for rows.Next() {
			o, err := scanOrder(rows)
			if err != nil {
				rows.Close()
				return nil, 0, fmt.Errorf("lock orders: %w", err)
			}
			orders[o.ID] = &lockedOrder{o: o}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, 0, fmt.Errorf("lock orders: %w", err)
		}
	}

	// 3. Lock the products, by SKU.
	var skus []string
	for i, o := range ops {
		if live[i] && o.kind == opCreate {
			if k, ok := stored[o.create.IdempotencyKey]; ok && o.create.IdempotencyKey != "" && k.orderID != 0 {
				continue // a replay reserves nothing
			}
			for _, it := range o.create.Items {
				skus = append(skus, it.SKU)
			}
		}
	}
	for _, lo := range orders {
		if lo.o.Status == hourglass.StatePendingPayment {
			for _, it := range lo.o.Items {
				skus = append(skus, it.SKU)
			}
		}
	}
	products := map[string]*lockedProduct{}
	if len(skus) > 0 {
		slices.Sort(skus) // byte order: the order of the ascii_bin primary key
		skus = slices.Compact(skus)
		args := make([]any, len(skus))
		for i, sku := range skus {
			args[i] = sku
		}
		rows, err := tx.QueryContext(ctx, `SELECT sku, category, available, reserved, sold FROM products WHERE sku IN (`+placeholders(len(args))+`) ORDER BY sku FOR UPDATE`, args...)
		if err != nil {
			return nil, 0, fmt.Errorf("lock products: %w", err)
		}
		for rows.Next() {
			var (
				sku string
				p   lockedProduct
			)
			if err := rows.Scan(&sku, &p.category, &p.available, &p.reserved, &p.sold); err != nil {
				rows.Close()
				return nil, 0, fmt.Errorf("lock products: %w", err)
			}
			p.read = [3]int64{p.available, p.reserved, p.sold}
			products[sku] = &p
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, 0, fmt.Errorf("lock products: %w", err)
		}
	}

	// 3b. Lock the timers: by key, then by id (timerbatch.go).
	timers := &batchTimers{}
	if len(timerKeys) > 0 || len(timerIDs) > 0 {
		if timers, err = lockTimers(ctx, tx, timerKeys, timerIDs, webhookIDs); err != nil {
			return nil, 0, err
		}
	}

	// 4. Now, read with the locks held, and the policy.
	var (
		nowMs     int64
		rawPolicy sql.NullString
		increment int64
		webhooks  bool // any subscription exists: fan out
	)
	if err := tx.QueryRowContext(ctx, `SELECT `+nowExpr+`, (SELECT value FROM settings WHERE name = 'policy'), @@auto_increment_increment,
	EXISTS (SELECT 1 FROM webhook_subscriptions)`,
		s.nowArg()).Scan(&nowMs, &rawPolicy, &increment, &webhooks); err != nil {
		return nil, 0, fmt.Errorf("read now and policy: %w", err)
	}
	now := hourglass.FromUnixMilli(nowMs)
	policy, err := s.policy.Decode(rawPolicy.String)
	if err != nil {
		return nil, 0, err
	}

	// 5. Decide each op in queue order.
	var (
		news    []newOrder
		newOf   = make([]int, len(ops))          // index into news of a create's order, else -1
		timerOf = make([]*lockedTimer, len(ops)) // the timer an arm's or cancel's result names
		sameAs  = make([]int, len(ops))          // a create answered by an earlier create of the batch (its news index), else -1
		events  []batchEvent
		inBatch = map[string]int{} // idempotency key → index into news
	)
	move := func(items []hourglass.Item, from, to func(p *lockedProduct) *int64) error {
		for _, it := range items {
			p := products[it.SKU]
			if p == nil {
				return fmt.Errorf("product %q of a pending order is missing", it.SKU)
			}
			*from(p) -= it.Quantity
			*to(p) += it.Quantity
			p.dirty = true
		}
		return nil
	}
	avail := func(p *lockedProduct) *int64 { return &p.available }
	resv := func(p *lockedProduct) *int64 { return &p.reserved }
	sold := func(p *lockedProduct) *int64 { return &p.sold }
	for i, o := range ops {
		newOf[i], sameAs[i] = -1, -1
		if !live[i] {
			continue
		}
		r := &results[i]
		switch o.kind {
		case opCreate:
			p := o.create
			if key := p.IdempotencyKey; key != "" {
				if j, ok := inBatch[key]; ok {
					if !bytes.Equal(news[j].hash, p.RequestHash) {
						r.err = hourglass.ErrIdempotencyKeyReused
					} else {
						sameAs[i] = j
					}
					continue
				}
				if k, ok := stored[key]; ok {
					if !bytes.Equal(k.hash, p.RequestHash) {
						r.err = hourglass.ErrIdempotencyKeyReused
					} else {
						r.replay = k.orderID
					}
					continue
				}
			}
			categories := make([]string, 0, len(p.Items))
			for j, it := range p.Items {
				prod := products[it.SKU]
				if prod == nil {
					r.err = hourglass.Errorf(hourglass.CodeNotFound, "items[%d].sku: product %q not found", j, it.SKU)
					break
				}
				if prod.available < it.Quantity {
					r.err = hourglass.Errorf(hourglass.CodeInsufficientStock, "items[%d]: %d of %q requested, %d available", j, it.Quantity, it.SKU, prod.available)
					break
				}
				categories = append(categories, prod.category)
			}
			if r.err != nil {
				continue
			}
			if err := move(p.Items, avail, resv); err != nil {
				return nil, 0, err
			}
			timeout := p.Timeout
			if timeout == 0 {
				timeout = policy.Timeout(categories)
			}
			newOf[i] = len(news)
			if p.IdempotencyKey != "" {
				inBatch[p.IdempotencyKey] = len(news)
			}
			events = append(events, batchEvent{typ: hourglass.EventOrderCreated, newIdx: len(news)})
			news = append(news, newOrder{
				o: hourglass.Order{
					UserID:    p.UserID,
					Status:    hourglass.StatePendingPayment,
					Items:     slices.Clone(p.Items),
					CreatedAt: now,
					Deadline:  now.Add(timeout.Truncate(time.Millisecond)),
				},
				items: o.items,
				key:   p.IdempotencyKey,
				hash:  p.RequestHash,
			})
		case opPay:
			lo := orders[o.id]
			if lo == nil {
				r.err = hourglass.Errorf(hourglass.CodeNotFound, "order %d not found", o.id)
				continue
			}
			cur := &lo.o
			// The compare-and-set, on the locked row: only a pending order
			// strictly before its deadline becomes paid. The close is its
			// mirror image (deadline <= now); the row lock orders them.
			if cur.Payable(now) {
				if err := move(cur.Items, resv, sold); err != nil {
					return nil, 0, err
				}
				cur.Status, cur.PaidAt, cur.PaymentID = hourglass.StatePaid, now, o.paymentID
				lo.dirty = true
				events = append(events, batchEvent{typ: hourglass.EventOrderPaid, newIdx: -1, orderID: cur.ID})
				r.order = cloneOrder(*cur)
				continue
			}
			if cur.PaymentID == o.paymentID && cur.Status != hourglass.StatePendingPayment && !cur.PaidAt.IsZero() {
				r.order = cloneOrder(*cur) // a repeat of the payment that succeeded
				continue
			}
			r.err = hourglass.Errorf(hourglass.CodeOrderNotPayable, "order %d is %s", o.id, describe(*cur, now))
		case opTransition:
			from, to, err := o.action.Transition()
			if err != nil {
				r.err = err
				continue
			}
			lo := orders[o.id]
			if lo == nil {
				r.err = hourglass.Errorf(hourglass.CodeNotFound, "order %d not found", o.id)
				continue
			}
			cur := &lo.o
			// A cancel, like a payment, is refused at or after the
			// deadline: by then the order belongs to the closer.
			if cur.Status != from || (from == hourglass.StatePendingPayment && !cur.Payable(now)) {
				r.err = hourglass.Errorf(hourglass.CodeInvalidTransition, "cannot %s order %d: it is %s", o.action, o.id, cur.View(now).Status)
				continue
			}
			if to == hourglass.StateCancelled {
				if err := move(cur.Items, resv, avail); err != nil {
					return nil, 0, err
				}
			}
			cur.Status = to
			lo.dirty = true
			events = append(events, batchEvent{typ: hourglass.EventFor(to), newIdx: -1, orderID: cur.ID})
			r.order = cloneOrder(*cur)
		case opClose:
			for _, id := range o.ids {
				lo := orders[id]
				if lo == nil || lo.o.Status != hourglass.StatePendingPayment || lo.o.Payable(now) {
					continue // paid, cancelled, already closed, unknown or not yet due: nothing to do
				}
				cur := &lo.o
				if err := move(cur.Items, resv, avail); err != nil {
					return nil, 0, err
				}
				cur.Status, cur.ClosedAt, cur.CloseReason = hourglass.StateClosed, now, hourglass.CloseReasonTimeout
				lo.dirty = true
				events = append(events, batchEvent{typ: hourglass.EventOrderClosed, newIdx: -1, orderID: id})
				r.closed = append(r.closed, hourglass.ClosedOrder{OrderID: id, Deadline: cur.Deadline, ClosedAt: now})
			}
		case opArm:
			timerOf[i], *r = timers.arm(o.arm, nowMs)
		case opCancel:
			timerOf[i], *r = timers.cancel(o.key, now)
		case opFire:
			fired, evs, err := timers.fire(o.ids, now)
			if err != nil {
				return nil, 0, err
			}
			r.fired = fired
			events = append(events, evs...)
		}
	}

	// 6. Write.
	if len(news) > 0 {
		args := make([]any, 0, 4*len(news))
		for _, n := range news {
			args = append(args, n.o.UserID, n.items, nowMs, hourglass.UnixMilli(n.o.Deadline))
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO orders (user_id, status, items, created_at, deadline) VALUES `+
			rowsOf(len(news), `(?, 'pending_payment', ?, ?, ?)`), args...)
		if err != nil {
			return nil, 0, fmt.Errorf("insert orders: %w", err)
		}
		// A multi-row INSERT … VALUES knows its row count, so InnoDB hands
		// it consecutive ids (step auto_increment_increment) in every
		// innodb_autoinc_lock_mode; LAST_INSERT_ID is the first.
		first, err := res.LastInsertId()
		if err != nil {
			return nil, 0, fmt.Errorf("insert orders: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(news)) {
			return nil, 0, fmt.Errorf("insert orders: %d rows inserted, want %d (%v)", n, len(news), err)
		}
		for j := range news {
			news[j].o.ID = first + int64(j)*increment
		}
	}
	var dirty []*lockedOrder
	for _, id := range orderIDs {
		if lo := orders[id]; lo != nil && lo.dirty {
			dirty = append(dirty, lo)
		}
	}
	if err := updateOrders(ctx, tx, dirty); err != nil {
		return nil, 0, err
	}
	var dirtySKUs []string
	for _, sku := range skus {
		if p := products[sku]; p != nil && p.dirty {
			dirtySKUs = append(dirtySKUs, sku)
		}
	}
	if err := updateProducts(ctx, tx, products, dirtySKUs); err != nil {
		return nil, 0, err
	}
	if err := timers.write(ctx, tx, nowMs, increment); err != nil {
		return nil, 0, err
	}
	// One multi-row INSERT, or several when timer.fired bodies make it
	// long (statementRuns).
	for _, run := range statementRuns(len(events), func(j int) int { return 2 * len(events[j].body) }) {
		part := events[run[0]:run[1]]
		// Orders' events have no body: a batch without timer.fired events
		// leaves the column out.
		withBody := slices.ContainsFunc(part, func(e batchEvent) bool { return e.body != nil })
		args := make([]any, 0, 5*len(part))
		for _, e := range part {
			id := e.orderID
			if e.newIdx >= 0 {
				id = news[e.newIdx].o.ID
			}
			evID := e.id
			if evID == "" {
				evID = hourglass.NewEventID()
			}
			args = append(args, evID, string(e.typ), id, nowMs)
			if withBody {
				args = append(args, nullBytes(e.body))
			}
		}
		query := `INSERT INTO events (id, type, order_id, created_at) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?)`)
		if withBody {
			query = `INSERT INTO events (id, type, order_id, created_at, body) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?, ?)`)
		}
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return nil, 0, fmt.Errorf("insert events: %w", err)
		}
		first, err := res.LastInsertId()
		if err != nil {
			return nil, 0, fmt.Errorf("insert events: %w", err)
		}
		for j := range part {
			part[j].seq = first + int64(j)*increment
		}
	}
	deferred := false
	if len(events) > 0 {
		if webhooks && s.deferFanOut(ops) {
			if events, err = deferClosed(ctx, tx, events); err != nil {
				return nil, 0, err
			}
			deferred = true
		}
		// To the webhooks subscribed now (or the one a timer names), read
		// with a shared lock so that a webhook deleted concurrently waits
		// for this commit and then deletes its deliveries too.
		if fanned, err = fanOut(ctx, tx, events, nowMs, webhooks); err != nil {
			return nil, 0, err
		}
	}
	if err := recordAttempts(ctx, tx, ops, live, results, nowMs); err != nil {
		return nil, 0, err
	}
	// The deadlines the batch schedules: its created orders', then its
	// armed timers'.
	due := make([]hourglass.Timer, 0, len(news))
	for _, n := range news {
		due = append(due, hourglass.Timer{OrderID: n.o.ID, Deadline: n.o.Deadline})
	}
	due = append(due, timers.announced()...)
	if s.cfg.Outbox && len(due) > 0 {
		args := make([]any, 0, 2*len(due))
		for _, t := range due {
			args = append(args, t.OrderID, hourglass.UnixMilli(t.Deadline))
		}
		// A re-armed timer may still have its row: it moves.
		if _, err := tx.ExecContext(ctx, `INSERT INTO timer_outbox (order_id, deadline) VALUES `+rowsOf(len(due), `(?, ?)`)+`
ON DUPLICATE KEY UPDATE deadline = VALUES(deadline)`, args...); err != nil {
			return nil, 0, fmt.Errorf("insert outbox timers: %w", err)
		}
	}
	var keyArgs []any
	for _, n := range news {
		if n.key != "" {
			keyArgs = append(keyArgs, []byte(n.key), nonNilBytes(n.hash), n.o.ID, nowMs)
		}
	}
	if len(keyArgs) > 0 {
		// A key committed by another process since step 1 fails here with a
		// duplicate key (1062): the batch runs again and replays it.
		if _, err := tx.ExecContext(ctx, `INSERT INTO idempotency_keys (idem_key, request_hash, order_id, created_at) VALUES `+
			rowsOf(len(keyArgs)/4, `(?, ?, ?, ?)`), keyArgs...); err != nil {
			return nil, 0, fmt.Errorf("insert idempotency keys: %w", err)
		}
	}
	// Last, so that its seq, handed out now, becomes visible soon after:
	// the feed of the other processes' WatchCreated (cluster.go).
	if len(due) > 0 {
		if err := s.writeFeed(ctx, tx, now, due); err != nil {
			return nil, 0, err
		}
	}

	// 8. Commit.
	if err := tx.Commit(); err != nil {
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
	for i := range ops {
		if j := newOf[i]; j >= 0 {
			results[i].order, results[i].created = cloneOrder(news[j].o), true
		}
		if j := sameAs[i]; j >= 0 {
			results[i].order = cloneOrder(news[j].o)
		}
		if lt := timerOf[i]; lt != nil && results[i].timer.ID == 0 {
			results[i].timer.ID = lt.t.ID // created by this batch
		}
	}
	return results, fanned, nil
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
func updateProducts(ctx context.Context, tx *sql.Tx, products map[string]*lockedProduct, skus []string) error {
	if len(skus) == 0 {
		return nil
	}
	groups := map[[3]int64][]any{}
	var order [][3]int64
	for _, sku := range skus {
		p := products[sku]
		d := [3]int64{p.available - p.read[0], p.reserved - p.read[1], p.sold - p.read[2]}
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
		p := products[sku]
		args = append(args, sku, p.available, p.reserved, p.sold)
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

func describe(o hourglass.Order, now time.Time) string {
	v := o.View(now)
	if v.Status == hourglass.StateClosed && o.Status == hourglass.StatePendingPayment {
		return "past its deadline " + v.Deadline.Format(time.RFC3339Nano)
	}
	if v.Status == hourglass.StatePaid || v.Status == hourglass.StateShipped || v.Status == hourglass.StateCompleted {
		return string(v.Status) + " with another payment_id"
	}
	return string(v.Status)
}
