package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
	"zombiezen.com/go/sqlite"
)

const orderColumns = `id, user_id, status, items, created_at, deadline, paid_at, closed_at, close_reason, payment_id`

// CreateOrder implements hourglass.Store. The stock check and the reservation
// run on the single writer, so check-then-update cannot race.
func (s *Store) CreateOrder(ctx context.Context, p hourglass.CreateOrderParams) (hourglass.Order, bool, error) {
	if err := plan.ValidateCreate(p); err != nil {
		return hourglass.Order{}, false, err
	}
	items := stored.EncodeItems(p.Items)
	var (
		out     hourglass.Order
		created bool
		fanned  int // deliveries created with the event
	)
	due := func(u *hourglass.DueUpdate) {
		if created {
			u.Due = append(u.Due, hourglass.DueItem{ID: out.ID, At: out.Deadline})
		}
	}
	err := s.writeDue(ctx, due, func(conn *sqlite.Conn, now time.Time) error {
		fanned = 0 // the op may be retried alone after a batch failure
		// The rows the planner decides on: the key, if stored, and the
		// products; the policy is read in the write, so a policy put
		// through another store value on this database governs the order.
		admit := &plan.Admission{Now: hourglass.FromUnixMilli(hourglass.UnixMilli(now)), Stock: plan.Stock{}, Keys: map[string]plan.StoredKey{},
			Policy: func() (hourglass.Policy, error) { return s.loadPolicy(conn) }}
		if p.IdempotencyKey != "" {
			stmt := conn.Prep(`SELECT request_hash, order_id FROM idempotency_keys WHERE key = ?1`)
			stmt.BindText(1, p.IdempotencyKey)
			if _, err := step(stmt, func(st *sqlite.Stmt) {
				k := plan.StoredKey{Hash: make([]byte, st.ColumnLen(0)), OrderID: st.ColumnInt64(1)}
				st.ColumnBytes(0, k.Hash)
				admit.Keys[p.IdempotencyKey] = k
			}); err != nil {
				return fmt.Errorf("sqlite: look up idempotency key: %w", err)
			}
		}
		for _, it := range p.Items {
			stmt := conn.Prep(`SELECT category, available FROM products WHERE sku = ?1`)
			stmt.BindText(1, it.SKU)
			if _, err := step(stmt, func(st *sqlite.Stmt) {
				admit.Stock[it.SKU] = &plan.Product{Category: st.ColumnText(0), Available: st.ColumnInt64(1)}
			}); err != nil {
				return fmt.Errorf("sqlite: read product %q: %w", it.SKU, err)
			}
		}
		d, err := admit.Create(p)
		switch {
		case err != nil:
			return err
		case d.Err != nil:
			return d.Err
		case d.Replay != nil:
			out, err = getOrder(conn, d.Replay.OrderID)
			return err
		}
		for _, it := range p.Items {
			if err := moveStock(conn, it.SKU, it.Quantity, "available", "reserved"); err != nil {
				return err
			}
		}
		createdMs, deadlineMs := hourglass.UnixMilli(d.Order.CreatedAt), hourglass.UnixMilli(d.Order.Deadline)
		stmt := conn.Prep(`INSERT INTO orders (user_id, status, items, created_at, deadline) VALUES (?1, ?2, ?3, ?4, ?5)`)
		stmt.BindText(1, p.UserID)
		stmt.BindText(2, string(hourglass.StatePendingPayment))
		stmt.BindText(3, items)
		stmt.BindInt64(4, createdMs)
		stmt.BindInt64(5, deadlineMs)
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: insert order: %w", err)
		}
		id := conn.LastInsertRowID()
		if s.cfg.Outbox {
			stmt := conn.Prep(`INSERT INTO timer_outbox (order_id, deadline) VALUES (?1, ?2)`)
			stmt.BindInt64(1, id)
			stmt.BindInt64(2, deadlineMs)
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: insert outbox timer: %w", err)
			}
		}
		if p.IdempotencyKey != "" {
			stmt := conn.Prep(`INSERT INTO idempotency_keys (key, request_hash, order_id, created_at) VALUES (?1, ?2, ?3, ?4)`)
			stmt.BindText(1, p.IdempotencyKey)
			stmt.BindBytes(2, p.RequestHash)
			stmt.BindInt64(3, id)
			stmt.BindInt64(4, createdMs)
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: insert idempotency key: %w", err)
			}
		}
		out, created = *d.Order, true
		out.ID = id
		fanned, err = s.writeEvent(conn, createdMs, out)
		return err
	})
	if err != nil {
		return hourglass.Order{}, false, err
	}
	if fanned > 0 {
		s.w.NotifyDeliveries()
	}
	return out, created, nil
}

func getOrder(conn *sqlite.Conn, id int64) (hourglass.Order, error) {
	stmt := conn.Prep(`SELECT ` + orderColumns + ` FROM orders WHERE id = ?1`)
	stmt.BindInt64(1, id)
	var (
		o       hourglass.Order
		scanErr error
	)
	found, err := step(stmt, func(st *sqlite.Stmt) { o, scanErr = scanOrder(st) })
	if err != nil {
		return o, fmt.Errorf("sqlite: get order %d: %w", id, err)
	}
	if scanErr != nil {
		return o, scanErr
	}
	if !found {
		return o, plan.OrderNotFound(id)
	}
	return o, nil
}

func scanOrder(st *sqlite.Stmt) (hourglass.Order, error) {
	o := hourglass.Order{
		ID:          st.ColumnInt64(0),
		UserID:      st.ColumnText(1),
		Status:      hourglass.State(st.ColumnText(2)),
		CreatedAt:   hourglass.FromUnixMilli(st.ColumnInt64(4)),
		Deadline:    hourglass.FromUnixMilli(st.ColumnInt64(5)),
		CloseReason: st.ColumnText(8),
		PaymentID:   st.ColumnText(9),
	}
	if !st.ColumnIsNull(6) {
		o.PaidAt = hourglass.FromUnixMilli(st.ColumnInt64(6))
	}
	if !st.ColumnIsNull(7) {
		o.ClosedAt = hourglass.FromUnixMilli(st.ColumnInt64(7))
	}
	items, err := stored.DecodeItems(st.ColumnText(3))
	if err != nil {
		return o, fmt.Errorf("sqlite: order %d: %w", o.ID, err)
	}
	o.Items = items
	return o, nil
}

// PayOrder implements hourglass.Store.
func (s *Store) PayOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	return s.pay(ctx, id, paymentID, false)
}

// PayDueOrder implements hourglass.Store: PayOrder without the deadline
// check (the payment check before the close answered paid).
func (s *Store) PayDueOrder(ctx context.Context, id int64, paymentID string) (hourglass.Order, error) {
	return s.pay(ctx, id, paymentID, true)
}

// pay pays order id; due drops the deadline check (PayDueOrder).
func (s *Store) pay(ctx context.Context, id int64, paymentID string, due bool) (hourglass.Order, error) {
	if err := hourglass.ValidatePaymentID(paymentID); err != nil {
		return hourglass.Order{}, err
	}
	var (
		out    hourglass.Order
		fanned int // deliveries created with the event
	)
	gone := func(u *hourglass.DueUpdate) { u.Gone = append(u.Gone, id) }
	err := s.writeDue(ctx, gone, func(conn *sqlite.Conn, now time.Time) error {
		fanned = 0 // the op may be retried alone after a batch failure
		nowMs := hourglass.UnixMilli(now)
		// The compare-and-set: only a pending order strictly before its
		// deadline becomes paid (any pending order for PayDueOrder, ?4).
		// The closer's CAS is the mirror image (deadline <= now), and both
		// run on this one writer.
		stmt := conn.Prep(`UPDATE orders SET status = 'paid', paid_at = ?2, payment_id = ?3
WHERE id = ?1 AND status = 'pending_payment' AND (deadline > ?2 OR ?4) RETURNING ` + orderColumns)
		stmt.BindInt64(1, id)
		stmt.BindInt64(2, nowMs)
		stmt.BindText(3, paymentID)
		stmt.BindBool(4, due)
		var scanErr error
		found, err := step(stmt, func(st *sqlite.Stmt) { out, scanErr = scanOrder(st) })
		if err != nil {
			return fmt.Errorf("sqlite: pay order %d: %w", id, err)
		}
		if scanErr != nil {
			return scanErr
		}
		if found {
			for _, it := range out.Items {
				if err := moveStock(conn, it.SKU, it.Quantity, "reserved", "sold"); err != nil {
					return err
				}
			}
			fanned, err = s.writeEvent(conn, nowMs, out)
			return err
		}
		cur, err := getOrder(conn, id)
		if err != nil {
			return err
		}
		decide := func() (bool, bool, error) { return plan.Pay(&cur, id, paymentID, now) }
		if due {
			decide = func() (bool, bool, error) { return plan.PayDue(&cur, id, paymentID) }
		}
		switch pay, repeat, err := decide(); {
		case repeat:
			out = cur
			return nil
		case pay: // cannot happen: the compare-and-set ran at this now
			return hourglass.Errorf(hourglass.CodeOrderNotPayable, "order %d is %s", id, cur.Status)
		default:
			return err
		}
	})
	if err == nil && fanned > 0 {
		s.w.NotifyDeliveries()
	}
	return out, err
}

// ExtendOrder implements hourglass.Store: the planner decides on the row
// the single writer reads (plan.Extend); the new deadline moves the
// order's outbox timer too, and is announced on the due feed.
func (s *Store) ExtendOrder(ctx context.Context, p hourglass.ExtendOrderParams) (hourglass.Order, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Order{}, err
	}
	var (
		out      hourglass.Order
		extended bool
		fanned   int // deliveries created with the event
	)
	due := func(u *hourglass.DueUpdate) {
		if extended {
			u.Due = append(u.Due, hourglass.DueItem{ID: out.ID, At: out.Deadline})
		}
	}
	err := s.writeDue(ctx, due, func(conn *sqlite.Conn, now time.Time) error {
		fanned, extended = 0, false // the op may be retried alone after a batch failure
		cur, err := getOrder(conn, p.ID)
		if hourglass.ErrorCode(err) == hourglass.CodeNotFound {
			_, _, _, err = plan.Extend(nil, p, now)
			return err
		} else if err != nil {
			return err
		}
		extend, repeat, target, err := plan.Extend(&cur, p, hourglass.FromUnixMilli(hourglass.UnixMilli(now)))
		switch {
		case err != nil:
			return err
		case repeat:
			out = cur
			return nil
		case !extend:
			return fmt.Errorf("sqlite: extend order %d: the planner decided nothing", p.ID)
		}
		nowMs, targetMs := hourglass.UnixMilli(now), hourglass.UnixMilli(target)
		stmt := conn.Prep(`UPDATE orders SET deadline = ?2 WHERE id = ?1 AND status = 'pending_payment'`)
		stmt.BindInt64(1, p.ID)
		stmt.BindInt64(2, targetMs)
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: extend order %d: %w", p.ID, err)
		}
		if s.cfg.Outbox {
			stmt := conn.Prep(`INSERT INTO timer_outbox (order_id, deadline) VALUES (?1, ?2)
ON CONFLICT (order_id) DO UPDATE SET deadline = excluded.deadline`)
			stmt.BindInt64(1, p.ID)
			stmt.BindInt64(2, targetMs)
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: extend order %d: outbox timer: %w", p.ID, err)
			}
		}
		out, extended = cur, true
		out.Deadline = target
		fanned, err = s.writeOrderEvent(conn, nowMs, hourglass.EventOrderExtended, out, true)
		return err
	})
	if err == nil && fanned > 0 {
		s.w.NotifyDeliveries()
	}
	return out, err
}

// TransitionOrder implements hourglass.Store.
func (s *Store) TransitionOrder(ctx context.Context, id int64, a hourglass.Action) (hourglass.Order, error) {
	from, to, err := plan.Action(a)
	if err != nil {
		return hourglass.Order{}, err
	}
	var (
		out    hourglass.Order
		fanned int // deliveries created with the event
	)
	gone := func(u *hourglass.DueUpdate) {
		if a == hourglass.ActionCancel {
			u.Gone = append(u.Gone, id)
		}
	}
	err = s.writeDue(ctx, gone, func(conn *sqlite.Conn, now time.Time) error {
		fanned = 0 // the op may be retried alone after a batch failure
		nowMs := hourglass.UnixMilli(now)
		// A cancel, like a payment, is refused at or after the deadline: by
		// then the order belongs to the closer.
		stmt := conn.Prep(`UPDATE orders SET status = ?3 WHERE id = ?1 AND status = ?2
AND (?2 <> 'pending_payment' OR deadline > ?4) RETURNING ` + orderColumns)
		stmt.BindInt64(1, id)
		stmt.BindText(2, string(from))
		stmt.BindText(3, string(to))
		stmt.BindInt64(4, nowMs)
		var scanErr error
		found, err := step(stmt, func(st *sqlite.Stmt) { out, scanErr = scanOrder(st) })
		if err != nil {
			return fmt.Errorf("sqlite: %s order %d: %w", a, id, err)
		}
		if scanErr != nil {
			return scanErr
		}
		if !found {
			cur, err := getOrder(conn, id)
			if err != nil {
				return err
			}
			if err := plan.Transition(&cur, id, a, from, now); err != nil {
				return err
			}
			return hourglass.Errorf(hourglass.CodeInvalidTransition, "cannot %s order %d: it is %s", a, id, cur.Status) // cannot happen: the compare-and-set ran at this now
		}
		if to == hourglass.StateCancelled {
			for _, it := range out.Items {
				if err := moveStock(conn, it.SKU, it.Quantity, "reserved", "available"); err != nil {
					return err
				}
			}
		}
		fanned, err = s.writeEvent(conn, nowMs, out)
		return err
	})
	if err == nil && fanned > 0 {
		s.w.NotifyDeliveries()
	}
	return out, err
}

// CloseOrders implements hourglass.Store. The work is set-based, so a burst
// of closes costs a few statements per batch instead of several per order:
// one UPDATE … RETURNING closes every listed order still pending and due,
// each product's stock is released by one UPDATE with the batch's sum, and
// the events (and their webhook deliveries) are inserted together.
func (s *Store) CloseOrders(ctx context.Context, ids []int64) ([]hourglass.ClosedOrder, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	list := jsonIDs(ids)
	var (
		closed   []hourglass.ClosedOrder
		fanned   int  // deliveries created with the events
		deferred bool // or left to the fan-out loop
	)
	err := s.writeUrgent(ctx, len(ids), func(conn *sqlite.Conn, now time.Time) error {
		closed, fanned, deferred = closed[:0], 0, false // the op may be retried alone after a batch failure
		nowMs := hourglass.UnixMilli(now)
		// NOT INDEXED: look each id up by rowid. Left to itself the planner
		// walks the (status, deadline) index, which in a burst holds every
		// order due at this instant. OR FAIL: a failing constraint would fail
		// the whole write op anyway (and roll back its transaction), so the
		// statement needs no statement journal of its own, which copied
		// every page the batch touched.
		stmt := conn.Prep(`UPDATE OR FAIL orders NOT INDEXED SET status = 'closed', closed_at = ?2, close_reason = 'timeout'
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'pending_payment' AND deadline <= ?2
RETURNING id, deadline, items`)
		defer stmt.Reset()
		stmt.BindText(1, string(list))
		stmt.BindInt64(2, nowMs)
		release := make(map[string]int64, 1)
		for {
			row, err := stmt.Step()
			if err != nil {
				return fmt.Errorf("sqlite: close %d orders: %w", len(ids), err)
			}
			if !row {
				break
			}
			id := stmt.ColumnInt64(0)
			if err := sumItems(stmt.ColumnText(2), release); err != nil {
				return fmt.Errorf("sqlite: close order %d: %w", id, err)
			}
			closed = append(closed, hourglass.ClosedOrder{
				OrderID:  id,
				Deadline: hourglass.FromUnixMilli(stmt.ColumnInt64(1)),
				ClosedAt: hourglass.FromUnixMilli(nowMs),
			})
		}
		stmt.Reset()
		if len(closed) == 0 {
			return nil // all paid, cancelled, already closed or not yet due
		}
		// Release the stock in SKU order, so two batches never take the
		// products' pages in a different order (one writer today, but cheap).
		skus := make([]string, 0, len(release))
		for sku := range release {
			skus = append(skus, sku)
		}
		slices.Sort(skus)
		for _, sku := range skus {
			if err := moveStock(conn, sku, release[sku], "reserved", "available"); err != nil {
				return err
			}
		}
		var err error
		fanned, deferred, err = s.writeEvents(conn, nowMs, hourglass.EventFor(hourglass.StateClosed), closed)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.fannedOut(fanned, len(closed))
	if fanned > 0 {
		s.w.NotifyDeliveries()
	}
	if deferred {
		s.fanOut.Wake()
	}
	return closed, nil
}

// writeEvents is writeEvent for many orders that entered the same state in
// one write op (a batch of closes): one event row each, then each
// subscribed webhook's deliveries for all of them with one INSERT … SELECT
// per subscribed type. It returns the number of deliveries created, or
// deferred when it left them to the fan-out loop.
func (s *Store) writeEvents(conn *sqlite.Conn, nowMs int64, typ hourglass.EventType, closed []hourglass.ClosedOrder) (fanned int, deferred bool, err error) {
	if typ == "" {
		return 0, false, fmt.Errorf("sqlite: write events: no event type")
	}
	stmt := conn.Prep(`INSERT INTO events (id, type, order_id, created_at) VALUES (?1, ?2, ?3, ?4)`)
	var first, last int64
	for i, c := range closed {
		stmt.BindText(1, hourglass.NewEventID())
		stmt.BindText(2, string(typ))
		stmt.BindInt64(3, c.OrderID)
		stmt.BindInt64(4, nowMs)
		if _, err := step(stmt, nil); err != nil {
			return 0, false, fmt.Errorf("sqlite: write %s event of order %d: %w", typ, c.OrderID, err)
		}
		seq := conn.LastInsertRowID()
		if i == 0 {
			first = seq
		}
		last = seq
	}
	if s.webhookCount(conn) <= 0 {
		return 0, false, nil
	}
	if fanout.Burst(s.w.Urgent(), len(closed)) {
		// Part of a burst (more closes queued behind this one, or a full
		// batch): leave the deliveries to the fan-out loop, so the close
		// transactions are not several times longer for them.
		stmt := conn.Prep(`INSERT INTO fanout_pending (first_seq, last_seq, type) VALUES (?1, ?2, ?3)`)
		stmt.BindInt64(1, first)
		stmt.BindInt64(2, last)
		stmt.BindText(3, string(typ))
		if _, err := step(stmt, nil); err != nil {
			return 0, false, fmt.Errorf("sqlite: defer the fan-out of %d %s events: %w", len(closed), typ, err)
		}
		return 0, true, nil
	}
	fanned, err = fanOutEvents(conn, nowMs, typ, first, last)
	return fanned, false, err
}

// fanOutEvents creates the deliveries of the events with a seq in [first,
// last], all of type typ, to every webhook subscribed to typ or "*", with
// one INSERT … SELECT per subscribed type. It returns the number created.
//
// Every event with a seq in [first, last] must be of type typ: one op
// wrote them all (the single writer inserts nothing in between). Streams
// are ordered by event seq, so deliveries created later (a deferred fan-out,
// see the fan-out loop) still keep each (webhook, order) stream in event order. OR FAIL: as
// CloseOrders' UPDATE, the statement needs no statement journal (the op's
// failure rolls its transaction back).
func fanOutEvents(conn *sqlite.Conn, nowMs int64, typ hourglass.EventType, first, last int64) (int, error) {
	fanned := 0
	for _, t := range [...]string{string(typ), string(hourglass.EventTypeAll)} {
		stmt := conn.Prep(`INSERT OR FAIL INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT w.webhook_id, e.seq, e.order_id, 'pending', 0, ?3 FROM events e, webhook_subscriptions w
WHERE e.seq BETWEEN ?1 AND ?2 AND w.type = ?4 ORDER BY e.seq, w.webhook_id`)
		stmt.BindInt64(1, first)
		stmt.BindInt64(2, last)
		stmt.BindInt64(3, nowMs)
		stmt.BindText(4, t)
		if _, err := step(stmt, nil); err != nil {
			return 0, fmt.Errorf("sqlite: fan out %d %s events: %w", last-first+1, typ, err)
		}
		fanned += conn.Changes()
	}
	return fanned, nil
}

// sumItems adds the quantity of each item of an order's items column to
// by[sku]. The column is written by stored.EncodeItems, whose exact form it parses
// without reflection; anything else goes through stored.DecodeItems.
func sumItems(raw string, by map[string]int64) error {
	if items, ok := parseEncodedItems(raw); ok {
		for _, it := range items {
			by[it.SKU] += it.Quantity
		}
		return nil
	}
	items, err := stored.DecodeItems(raw)
	if err != nil {
		return err
	}
	for _, it := range items {
		by[it.SKU] += it.Quantity
	}
	return nil
}

// parseEncodedItems parses exactly what stored.EncodeItems writes; ok is false for
// anything else (then stored.DecodeItems, which accepts any JSON, must be used).
func parseEncodedItems(raw string) (items []hourglass.Item, ok bool) {
	const skuKey, qtyKey = `{"sku":"`, `","quantity":`
	rest, ok := strings.CutPrefix(raw, "[")
	for ok && rest != "]" {
		var sku string
		if rest, ok = strings.CutPrefix(rest, skuKey); !ok {
			return nil, false
		}
		if sku, rest, ok = strings.Cut(rest, qtyKey); !ok || strings.ContainsAny(sku, `"\`) {
			return nil, false
		}
		end := strings.IndexAny(rest, ",}")
		if end <= 0 || rest[end] != '}' {
			return nil, false
		}
		qty, err := strconv.ParseInt(rest[:end], 10, 64)
		if err != nil {
			return nil, false
		}
		items = append(items, hourglass.Item{SKU: sku, Quantity: qty})
		rest = rest[end+1:]
		if next, more := strings.CutPrefix(rest, ","); more && next != "]" {
			rest = next
		} else if more || rest != "]" {
			return nil, false
		}
	}
	return items, ok
}

// jsonIDs returns ids as a JSON array, for a statement that reads them with
// json_each: one bound parameter whatever the batch's size.
func jsonIDs(ids []int64) []byte {
	list := make([]byte, 0, 20*len(ids)+2)
	list = append(list, '[')
	for i, id := range ids {
		if i > 0 {
			list = append(list, ',')
		}
		list = strconv.AppendInt(list, id, 10)
	}
	return append(list, ']')
}
