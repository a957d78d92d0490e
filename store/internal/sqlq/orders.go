package sqlq

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// OrderColumns are an order's columns, in stored.OrderRow's order.
const OrderColumns = stored.OrderColumns

// RenderEvent returns the JSON body of an order's event: current is the
// order's row as it is now, seen as of the event (hourglass.Order.AsOf).
func RenderEvent(id string, typ hourglass.EventType, createdAtMs int64, current hourglass.Order) []byte {
	return hourglass.MarshalEvent(hourglass.Event{
		ID:        id,
		Type:      typ,
		CreatedAt: hourglass.FromUnixMilli(createdAtMs),
		Order:     current.AsOf(typ),
	})
}

// order reads one order; not_found when there is none.
func (x q) order(ctx context.Context, id int64, extra ...any) (hourglass.Order, error) {
	var r stored.OrderRow
	found, err := x.row(ctx, `SELECT `+OrderColumns+` FROM orders WHERE id = ?`, []any{id}, r.Dest(extra...)...)
	if err != nil {
		return hourglass.Order{}, err
	}
	if !found {
		return hourglass.Order{}, plan.OrderNotFound(id)
	}
	return r.Order()
}

// Order implements hourglass.Store.
func (s *Store) Order(ctx context.Context, id int64) (hourglass.Order, error) {
	var o hourglass.Order
	err := s.read(ctx, "get order", func(x q) (err error) {
		o, err = x.order(ctx, id)
		return err
	})
	return o, err
}

// ViewOrder implements hourglass.OrderViewer: the order as Order.View shows
// it at now as the writers read it (Dialect.Now: the server's clock, which
// decides pays), read in the same statement as the row. Errors: not_found,
// unavailable.
func (s *Store) ViewOrder(ctx context.Context, id int64) (hourglass.Order, error) {
	var (
		r     stored.OrderRow
		nowMs int64
		o     hourglass.Order
	)
	err := s.read(ctx, "view order", func(x q) error {
		found, err := x.row(ctx, `SELECT `+OrderColumns+`, `+s.d.Now+` FROM orders WHERE id = ?`, []any{s.db.NowArg(), id}, r.Dest(&nowMs)...)
		if err != nil {
			return err
		}
		if !found {
			return plan.OrderNotFound(id)
		}
		o, err = r.Order()
		return err
	})
	if err != nil {
		return o, err
	}
	return o.View(hourglass.FromUnixMilli(nowMs)), nil
}

// Now implements hourglass.OrderViewer: now as the writers read it
// (Dialect.Now). Errors: unavailable.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var ms int64
	err := s.read(ctx, "read now", func(x q) error {
		var err error
		ms, err = s.now(ctx, x)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return hourglass.FromUnixMilli(ms), nil
}

// ListOrders implements hourglass.Store. Status filtering follows
// Order.View: a pending order past its deadline counts as closed.
func (s *Store) ListOrders(ctx context.Context, f hourglass.OrderFilter) ([]hourglass.Order, error) {
	query, args := s.ListOrdersSQL(f)
	var (
		out []hourglass.Order
		r   stored.OrderRow
	)
	err := s.read(ctx, "list orders", func(x q) error {
		out = out[:0]
		return x.each(ctx, query, args, r.Dest(), func() error {
			o, err := r.Order()
			out = append(out, o)
			return err
		})
	})
	return out, err
}

// ListOrdersSQL is ListOrders' statement and arguments (exported for the
// stores' plan tests). Every filter reads a range of an index in the list's
// order, so a page costs its size whatever the table's:
//
//   - a user's orders: orders_user_id (user_id, id), the user's rows, the
//     other filters checked on them and, ordered by a time, sorted (a
//     user's orders are few);
//   - a status: its range of orders_status_id (status, id) in id order, of
//     orders_status_deadline (status, deadline, id) by deadline, of
//     orders_status_created (status, created_at, id) by creation time;
//     closed is two such ranges merged, closed orders and pending ones past
//     their deadline (which the engine is about to close);
//   - a time range and no status: the ranges of that index for every
//     status, merged (each reads at most a page);
//   - a deadline and a creation range: the narrower range's index (an
//     open range is the widest), the other range checked on the way, and
//     sorted by deadline when that is the creation range;
//   - nothing: the primary key.
func (s *Store) ListOrdersSQL(f hourglass.OrderFilter) (string, []any) {
	nowMs := hourglass.UnixMilli(f.Now)
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	sort := f.Sort()
	col, index := "id", "orders_status_id"
	switch sort {
	case hourglass.OrderByDeadline:
		col, index = "deadline", "orders_status_deadline"
	case hourglass.OrderByCreated:
		col, index = "created_at", "orders_status_created"
	}
	if sort == hourglass.OrderByDeadline && (!f.CreatedFrom.IsZero() || !f.CreatedBefore.IsZero()) &&
		span(f.CreatedFrom, f.CreatedBefore) < span(f.DeadlineFrom, f.DeadlineBefore) {
		// Both ranges: the narrower one is read, the other checked on the
		// way. Read by deadline, a narrow creation range would be found
		// quickly and then the deadline range read on to its end for a
		// match that never comes; read by creation time, the orders of the
		// range are sorted by deadline instead (a range's worth at most).
		index = "orders_status_created"
	}
	// The deadline as the arms compare and sort it: read through the
	// creation range, "deadline + 0", which no index serves, so that a
	// planner that chooses (PostgreSQL's, which counts the two ranges as
	// independent) does not walk the deadline index instead.
	deadline := "deadline"
	if sort == hourglass.OrderByDeadline && index == "orders_status_created" {
		deadline = "deadline + 0"
	}
	orderBy := ` ORDER BY id LIMIT ?`
	if col != "id" {
		orderBy = ` ORDER BY ` + col + `, id LIMIT ?`
	}
	armOrderBy := strings.Replace(orderBy, "deadline", deadline, 1)

	// The conditions every arm shares: the ranges, the user, the cursor.
	var (
		common []string
		args   []any
	)
	bound := func(col, op string, t time.Time) {
		if !t.IsZero() {
			common = append(common, col+` `+op+` ?`)
			args = append(args, ceilMilli(t))
		}
	}
	bound(deadline, ">=", fromCursor(f.DeadlineFrom, sort == hourglass.OrderByDeadline && f.After != 0, f.AfterAt))
	bound(deadline, "<", f.DeadlineBefore)
	bound("created_at", ">=", fromCursor(f.CreatedFrom, sort == hourglass.OrderByCreated && f.After != 0, f.AfterAt))
	bound("created_at", "<", f.CreatedBefore)
	if f.UserID != "" {
		common = append(common, `user_id = ?`)
		args = append(args, f.UserID)
	}
	if f.After != 0 {
		if col == "id" {
			common = append(common, `id > ?`)
			args = append(args, f.After)
		} else {
			cond, a := s.keysetAfter(strings.Replace(col, "deadline", deadline, 1), "id", hourglass.UnixMilli(f.AfterAt), f.After)
			common = append(common, cond)
			args = append(args, a...)
		}
	}

	// The arms: a stored status each, with the deadline bound that makes
	// it the view's status.
	type arm struct {
		cond string
		args []any
	}
	var arms []arm
	switch f.Status {
	case "":
		if sort != hourglass.OrderByID && f.UserID == "" {
			for _, st := range hourglass.States() {
				arms = append(arms, arm{`status = ?`, []any{string(st)}})
			}
		}
	case hourglass.StatePendingPayment:
		arms = []arm{{`status = 'pending_payment' AND deadline > ?`, []any{nowMs}}}
	case hourglass.StateClosed:
		arms = []arm{{`status = 'closed'`, nil}, {`status = 'pending_payment' AND deadline <= ?`, []any{nowMs}}}
	default:
		arms = []arm{{`status = ?`, []any{string(f.Status)}}}
	}

	where := func(cond string, condArgs []any) (string, []any) {
		conds := common
		if cond != "" {
			conds = append([]string{cond}, common...)
		}
		a := append(append(append([]any(nil), condArgs...), args...), limit)
		if len(conds) == 0 {
			return armOrderBy, a
		}
		return ` WHERE ` + strings.Join(conds, ` AND `) + armOrderBy, a
	}
	sel := `SELECT ` + OrderColumns + ` FROM `
	switch {
	case f.UserID != "":
		var cond []string
		var condArgs []any
		for _, a := range arms {
			cond = append(cond, `(`+a.cond+`)`)
			condArgs = append(condArgs, a.args...)
		}
		c := ""
		if len(cond) > 0 {
			c = `(` + strings.Join(cond, ` OR `) + `)`
		}
		w, a := where(c, condArgs)
		return sel + s.d.From("orders", "orders_user_id") + w, a
	case len(arms) == 0:
		w, a := where("", nil)
		return sel + `orders` + w, a
	case len(arms) == 1:
		w, a := where(arms[0].cond, arms[0].args)
		return sel + s.d.From("orders", index) + w, a
	}
	var (
		parts   []string
		allArgs []any
	)
	for i, ar := range arms {
		w, a := where(ar.cond, ar.args)
		parts = append(parts, `SELECT * FROM (`+sel+s.d.From("orders", index)+w+`) a`+strconv.Itoa(i))
		allArgs = append(allArgs, a...)
	}
	return `SELECT * FROM (` + strings.Join(parts, "\nUNION ALL ") + `) o` + orderBy, append(allArgs, limit)
}

// span is the length of the range [from, before), a zero bound open: the
// longest duration when either is.
func span(from, before time.Time) time.Duration {
	if from.IsZero() || before.IsZero() {
		return math.MaxInt64
	}
	return max(before.Sub(from), 0)
}

// keysetAfter is Dialect.After's "(col, idCol) > (at, id)" with "col >=
// at" beside it: SQLite's form of After (an OR) bounds no index range, and
// a list's later pages read from the start of their range up to the
// cursor without it (page 64 of a deadline_before list: 6 ms, not 1).
func (s *Store) keysetAfter(col, idCol string, at, id int64) (string, []any) {
	cond, args := s.d.After(col, idCol, at, id)
	return col + ` >= ? AND ` + cond, append([]any{at}, args...)
}

// fromCursor is a range's start from, or none when a cursor (set, at at)
// at or after it starts the range (keysetAfter's "col >= at"): a planner
// given two lower bounds may seek to the range's start instead.
func fromCursor(from time.Time, set bool, at time.Time) time.Time {
	if set && !at.Before(from) {
		return time.Time{}
	}
	return from
}

// ceilMilli is t in unix ms rounded up: a stored time in ms is at or after
// t exactly when it is at or after ceilMilli(t), and before t exactly when
// it is before ceilMilli(t).
func ceilMilli(t time.Time) int64 {
	ms := hourglass.UnixMilli(t)
	if hourglass.FromUnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// due reads a page of (id, time) rows of PendingDue's shape (TimersDue's
// too): the rows of table due after (p.After, p.AfterID) up to p.Until, in
// (col, id) order, of p.Parts, through index.
func (s *Store) due(ctx context.Context, op, table, index, status, col string, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	after, afterArgs := s.d.After(col, "id", hourglass.UnixMilli(p.After), p.AfterID)
	query := `SELECT id, ` + col + ` FROM ` + s.d.From(table, index) + ` WHERE status = '` + status + `' AND ` + after +
		` AND ` + col + ` <= ? AND ` + s.d.InParts("id") + ` ORDER BY ` + col + `, id LIMIT ?`
	args := append(afterArgs, hourglass.UnixMilli(p.Until), p.Parts.Mask(), p.Limit)
	var (
		out    []hourglass.DueItem
		id, at int64
	)
	err := s.read(ctx, op, func(x q) error {
		out = out[:0]
		return x.each(ctx, query, args, []any{&id, &at}, func() error {
			out = append(out, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(at)})
			return nil
		})
	})
	return out, err
}

// PendingDue implements hourglass.Store: one range of the (status,
// deadline, id) index.
func (s *Store) PendingDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	return s.due(ctx, "pending due", "orders", "orders_status_deadline", "pending_payment", "deadline", p)
}

// eventColumns are an event's columns, in scanEvent's order.
const eventColumns = `seq, id, type, order_id, created_at, body`

// eventRow receives eventColumns.
type eventRow struct {
	e       hourglass.EventRecord
	typ     string
	created int64
}

func (r *eventRow) dest() []any {
	return []any{&r.e.Seq, &r.e.ID, &r.typ, &r.e.OrderID, &r.created, &r.e.Body}
}

func (r *eventRow) event() hourglass.EventRecord {
	e := r.e
	e.Type, e.CreatedAt = hourglass.EventType(r.typ), hourglass.FromUnixMilli(r.created)
	return e
}

// render fills in the body of each order event of evs (a timer's or a
// source's carries its own) from its order's row, read after the events
// (one query for the page), so that row is at or after each event's
// transition (hourglass.Order.AsOf). An event whose order does not exist
// is dropped when drop is set (OrderEvents of an id that is not an
// order's), an error otherwise (orders are never deleted).
func (x q) render(ctx context.Context, evs []hourglass.EventRecord, drop bool) ([]hourglass.EventRecord, error) {
	var ids []any
	seen := map[int64]bool{}
	for _, e := range evs {
		if stored.RenderedFromOrder(e.Type, e.Body) && !seen[e.OrderID] {
			seen[e.OrderID] = true
			ids = append(ids, e.OrderID)
		}
	}
	if len(ids) == 0 {
		return evs, nil
	}
	orders := make(map[int64]hourglass.Order, len(ids))
	var r stored.OrderRow
	err := x.each(ctx, `SELECT `+OrderColumns+` FROM orders WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, ids, r.Dest(), func() error {
		o, err := r.Order()
		orders[o.ID] = o
		return err
	})
	if err != nil {
		return nil, err
	}
	out := evs[:0]
	for _, e := range evs {
		if stored.RenderedFromOrder(e.Type, e.Body) {
			o, ok := orders[e.OrderID]
			if !ok && drop {
				continue
			}
			if !ok {
				return nil, fmt.Errorf("events: order %d of event %s not found", e.OrderID, e.ID)
			}
			e.Body = renderEvent(e.ID, e.Type, hourglass.UnixMilli(e.CreatedAt), e.Body, o)
		}
		out = append(out, e)
	}
	return out, nil
}

// Events implements hourglass.EventLog: one range of the primary key, then
// the orders of the page's order events in one query.
func (s *Store) Events(ctx context.Context, p hourglass.EventPage) ([]hourglass.EventRecord, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("events: limit must be positive, got %d", p.Limit)
	}
	until := p.Until
	if until <= 0 {
		until = 1<<63 - 1
	}
	return s.events(ctx, "events", `WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?`, []any{p.After, until, p.Limit}, false)
}

// OrderEvents implements hourglass.Database, for an order's id or a
// timer's (whose timer.fired events keep their body). It scans the events
// table (no index by order keeps every transition's insert cheap): for
// tests and debugging. An order that does not exist has none.
func (s *Store) OrderEvents(ctx context.Context, orderID int64) ([]hourglass.EventRecord, error) {
	out, err := s.events(ctx, "order events", `WHERE order_id = ? ORDER BY seq`, []any{orderID}, true)
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// events reads the events the clause selects, their orders' bodies
// rendered (drop: skip an order event whose order is gone).
func (s *Store) events(ctx context.Context, op, clause string, args []any, drop bool) ([]hourglass.EventRecord, error) {
	var out []hourglass.EventRecord
	err := s.read(ctx, op, func(x q) error {
		var r eventRow
		out = out[:0]
		err := x.each(ctx, `SELECT `+eventColumns+` FROM events `+clause, args, r.dest(), func() error {
			out = append(out, r.event())
			r.e.Body = nil
			return nil
		})
		if err != nil {
			return err
		}
		out, err = x.render(ctx, out, drop)
		return err
	})
	return out, err
}
