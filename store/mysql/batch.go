package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/fanout"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/writer"
)

// Group commit of order, timer and delivery-attempt writes: the writer
// (store/internal/writer) hands a batch of ops to dialect.Run, which runs
// the one algorithm of store/internal/batch in one transaction over txn,
// MySQL's statements. Locks are SELECT … ORDER BY key FOR UPDATE under
// READ COMMITTED (a key with no row locks nothing); a changed row is
// written once per batch, with one UPDATE … WHERE key IN (…) per distinct
// change or one multi-row upsert when the changes are many and varied.

// submit queues o in its lane and waits for its result. Once queued, an
// op runs even if its ctx ends while it waits, unless its batch has not
// begun when ctx ends: then it is skipped and ctx.Err() returned.
func (s *Store) submit(ctx context.Context, o *batch.Op) error {
	if err := s.w.Submit(ctx, o.Lane(), o); err != nil {
		return err
	}
	return o.Res.Err
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

// batchConfig is what the shared algorithm needs of the store.
func (s *Store) batchConfig() batch.Config {
	return batch.Config{Outbox: s.cfg.Outbox, DeferFanOut: func(closes int) bool { return fanout.Burst(s.w.Urgent(), closes) }}
}

// Run runs ops in one transaction. An error means nothing committed, unless
// it is marked writer.OutcomeUnknown or a lost connection.
func (d dialect) Run(ctx context.Context, ops []*batch.Op) (int, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("mysql: order write: %w", err)
	}
	out, err := batch.Run(ctx, d.batchConfig(), &txn{s: d.Store, tx: tx}, ops)
	if err != nil {
		tx.Rollback()
		return 0, fmt.Errorf("mysql: order write: %w", err)
	}
	if err := tx.Commit(); err != nil {
		if retryReason(err, false) != "" {
			return 0, fmt.Errorf("mysql: order write: %w", err) // rolled back (a deadlock or Galera's certification)
		}
		return 0, fmt.Errorf("mysql: order write: %w", writer.OutcomeUnknown(err))
	}
	if out.Deferred {
		d.fanOut.Wake()
	}
	return out.Deliveries, nil
}

// Classify implements writer.Dialect.
func (d dialect) Classify(err error) writer.Class { return d.classify(err) }

// txn is batch.Tx on one MySQL transaction.
type txn struct {
	s         *Store
	tx        *sql.Tx
	increment int64 // @@auto_increment_increment, read by Snapshot
}

var _ batch.Tx = (*txn)(nil)

// anys returns xs as arguments.
func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func (t *txn) StoredKeys(ctx context.Context, keys []string) (map[string]plan.StoredKey, error) {
	stored := map[string]plan.StoredKey{}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = []byte(k)
	}
	if err := eachRow(ctx, t.tx, `SELECT idem_key, request_hash, order_id FROM idempotency_keys WHERE idem_key IN (…)`, args, func(rows *sql.Rows) error {
		var (
			k   []byte
			key plan.StoredKey
		)
		err := rows.Scan(&k, &key.Hash, &key.OrderID)
		stored[string(k)] = key
		return err
	}); err != nil {
		return nil, fmt.Errorf("read idempotency keys: %w", err)
	}
	return stored, nil
}

func (t *txn) LockOrders(ctx context.Context, ids []int64) ([]hourglass.Order, error) {
	var out []hourglass.Order
	if err := eachRow(ctx, t.tx, `SELECT `+orderColumns+`, `+stored.ReminderColumns+` FROM orders WHERE id IN (…) ORDER BY id FOR UPDATE`, anys(ids), func(rows *sql.Rows) error {
		o, err := scanLockedOrder(rows)
		out = append(out, o)
		return err
	}); err != nil {
		return nil, fmt.Errorf("lock orders: %w", err)
	}
	return out, nil
}

func (t *txn) LockProducts(ctx context.Context, skus []string) (plan.Stock, error) {
	stock := plan.Stock{}
	if err := eachRow(ctx, t.tx, `SELECT sku, category, available, reserved, sold FROM products WHERE sku IN (…) ORDER BY sku FOR UPDATE`, anys(skus), func(rows *sql.Rows) error {
		var (
			sku string
			p   plan.Product
		)
		err := rows.Scan(&sku, &p.Category, &p.Available, &p.Reserved, &p.Sold)
		stock[sku] = &p
		return err
	}); err != nil {
		return nil, fmt.Errorf("lock products: %w", err)
	}
	return stock, nil
}

func (t *txn) lockTimers(ctx context.Context, where string, args []any) ([]*batch.Timer, error) {
	var out []*batch.Timer
	if err := eachRow(ctx, t.tx, `SELECT `+timerColumns+`, request_hash FROM timers WHERE `+where+` FOR UPDATE`, args, func(rows *sql.Rows) error {
		bt := &batch.Timer{}
		var err error
		bt.T, err = scanTimer(rows, &bt.Hash)
		out = append(out, bt)
		return err
	}); err != nil {
		return nil, fmt.Errorf("lock timers: %w", err)
	}
	return out, nil
}

func (t *txn) LockTimerKeys(ctx context.Context, keys []string) ([]*batch.Timer, error) {
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = []byte(k)
	}
	return t.lockTimers(ctx, `timer_key IN (…) ORDER BY timer_key`, args)
}

func (t *txn) LockTimerIDs(ctx context.Context, ids []int64) ([]*batch.Timer, error) {
	return t.lockTimers(ctx, `id IN (…) AND status = 'scheduled' ORDER BY id`, anys(ids))
}

func (t *txn) Webhooks(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out, err := t.webhooks(ctx, `SELECT id FROM webhooks WHERE id IN (…)`, ids)
	if err != nil {
		return nil, fmt.Errorf("look up webhooks: %w", err)
	}
	return out, nil
}

func (t *txn) LockWebhooks(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out, err := t.webhooks(ctx, `SELECT id FROM webhooks WHERE id IN (…) ORDER BY id LOCK IN SHARE MODE`, ids)
	if err != nil {
		return nil, fmt.Errorf("lock webhooks: %w", err)
	}
	return out, nil
}

func (t *txn) webhooks(ctx context.Context, query string, ids []int64) (map[int64]bool, error) {
	out := map[int64]bool{}
	err := eachRow(ctx, t.tx, query, anys(ids), func(rows *sql.Rows) error {
		var id int64
		err := rows.Scan(&id)
		out[id] = true
		return err
	})
	return out, err
}

func (t *txn) Snapshot(ctx context.Context) (batch.Snapshot, error) {
	var (
		nowMs  int64
		policy sql.NullString
		snap   batch.Snapshot
	)
	if err := t.tx.QueryRowContext(ctx, `SELECT `+nowExpr+`, (SELECT value FROM settings WHERE name = 'policy'), @@auto_increment_increment,
	EXISTS (SELECT 1 FROM webhook_subscriptions)`,
		t.s.nowArg()).Scan(&nowMs, &policy, &t.increment, &snap.Subscribed); err != nil {
		return snap, fmt.Errorf("read now and policy: %w", err)
	}
	snap.Now = hourglass.FromUnixMilli(nowMs)
	snap.Policy = func() (hourglass.Policy, error) { return t.s.policy.Decode(policy.String) }
	return snap, nil
}

// inserted sets the ids of the n rows a multi-row INSERT … VALUES inserted:
// it knows its row count, so InnoDB hands it consecutive ids (step
// auto_increment_increment) in every innodb_autoinc_lock_mode, and
// LAST_INSERT_ID is the first.
func (t *txn) inserted(res sql.Result, n int, set func(j int, id int64)) error {
	first, err := res.LastInsertId()
	if err != nil {
		return err
	}
	if got, err := res.RowsAffected(); err != nil || got != int64(n) {
		return fmt.Errorf("%d rows inserted, want %d (%v)", got, n, err)
	}
	for j := range n {
		set(j, first+int64(j)*t.increment)
	}
	return nil
}

func (t *txn) InsertOrders(ctx context.Context, orders []batch.NewOrder, now time.Time) error {
	args := make([]any, 0, 6*len(orders))
	for _, n := range orders {
		args = append(args, n.Order.UserID, n.Items, hourglass.UnixMilli(now), hourglass.UnixMilli(n.Order.Deadline),
			stored.RemindAtArg(n.Order.RemindAt), n.Order.RemindBefore.Milliseconds())
	}
	res, err := t.tx.ExecContext(ctx, `INSERT INTO orders (user_id, status, items, created_at, deadline, remind_at, remind_before_ms) VALUES `+
		rowsOf(len(orders), `(?, 'pending_payment', ?, ?, ?, ?, ?)`), args...)
	if err == nil {
		err = t.inserted(res, len(orders), func(j int, id int64) { orders[j].Order.ID = id })
	}
	if err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	return nil
}

// maxGroups is the most UPDATE … WHERE key IN (…) statements a batch
// sends for one table before it writes the rows with one upsert instead. A
// batch of creates usually moves every SKU by the same quantity (one
// group), a batch of closes sets every order to the same values: a plain
// UPDATE of a key list is cheaper for InnoDB than an upsert, which first
// tries each row as an insert.
const maxGroups = 2

// UpdateOrders writes one UPDATE per distinct set of values if there are
// at most maxGroups, else one upsert whose rows all exist (they are
// locked), so each is an update. VALUES() is understood by MariaDB and
// MySQL 8 (where it is deprecated in favour of a row alias MariaDB lacks).
func (t *txn) UpdateOrders(ctx context.Context, dirty []*hourglass.Order) error {
	type shape struct {
		status                 hourglass.State
		paidAt, closedAt       any
		closeReason, paymentID any
	}
	groups := map[shape][]any{}
	var order []shape
	for _, o := range dirty {
		k := shape{o.Status, nullMs(o.PaidAt), nullMs(o.ClosedAt), nullString(o.CloseReason), nullString(o.PaymentID)}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], o.ID)
	}
	if len(groups) <= maxGroups {
		for _, k := range order {
			ids := groups[k]
			args := append([]any{string(k.status), k.paidAt, k.closedAt, k.closeReason, k.paymentID}, ids...)
			if _, err := t.tx.ExecContext(ctx, `UPDATE orders SET status = ?, paid_at = ?, closed_at = ?, close_reason = ?, payment_id = ?
WHERE id IN (`+placeholders(len(ids))+`)`, args...); err != nil {
				return fmt.Errorf("update orders: %w", err)
			}
		}
		return nil
	}
	args := make([]any, 0, 6*len(dirty))
	for _, o := range dirty {
		args = append(args, o.ID, string(o.Status), nullMs(o.PaidAt), nullMs(o.ClosedAt), nullString(o.CloseReason), nullString(o.PaymentID))
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO orders (id, user_id, status, items, created_at, deadline, paid_at, closed_at, close_reason, payment_id) VALUES `+
		rowsOf(len(dirty), `(?, '', ?, '', 0, 0, ?, ?, ?, ?)`)+`
ON DUPLICATE KEY UPDATE status = VALUES(status), paid_at = VALUES(paid_at), closed_at = VALUES(closed_at),
	close_reason = VALUES(close_reason), payment_id = VALUES(payment_id)`, args...); err != nil {
		return fmt.Errorf("update orders: %w", err)
	}
	return nil
}

func (t *txn) ExtendOrder(ctx context.Context, id int64, deadline time.Time) error {
	if _, err := t.tx.ExecContext(ctx, `UPDATE orders SET deadline = ? WHERE id = ?`, hourglass.UnixMilli(deadline), id); err != nil {
		return fmt.Errorf("extend order %d: %w", id, err)
	}
	return nil
}

// UpdateProducts writes the changed products' stock (the rows are locked,
// so the values computed from them are current): one UPDATE per distinct
// change (a hot SKU's row is written once however many orders moved it),
// or one upsert of the new values when there are more than maxGroups.
func (t *txn) UpdateProducts(ctx context.Context, stock plan.Stock) error {
	skus := stock.Changed()
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
			if _, err := t.tx.ExecContext(ctx, `UPDATE products SET available = available + ?, reserved = reserved + ?, sold = sold + ?
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
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO products (sku, name, category, available, reserved, sold) VALUES `+
		rowsOf(len(skus), `(?, '', '', ?, ?, ?)`)+`
ON DUPLICATE KEY UPDATE available = VALUES(available), reserved = VALUES(reserved), sold = VALUES(sold)`, args...); err != nil {
		return fmt.Errorf("update products: %w", err)
	}
	return nil
}

func (t *txn) InsertTimers(ctx context.Context, timers []*batch.Timer) error {
	for _, run := range statementRuns(len(timers), func(j int) int { return timerBytes(timers[j]) }) {
		part := timers[run[0]:run[1]]
		args := make([]any, 0, 8*len(part))
		for _, bt := range part {
			tm := bt.T
			args = append(args, []byte(tm.Key), string(tm.Status), hourglass.UnixMilli(tm.FireAt), nullBytes(tm.Payload), nullID(tm.WebhookID), bt.Hash,
				hourglass.UnixMilli(tm.CreatedAt), hourglass.UnixMilli(tm.UpdatedAt))
		}
		res, err := t.tx.ExecContext(ctx, `INSERT INTO timers (timer_key, status, fire_at, payload, webhook_id, request_hash, created_at, updated_at) VALUES `+
			rowsOf(len(part), `(?, ?, ?, ?, ?, ?, ?, ?)`), args...)
		if err == nil {
			err = t.inserted(res, len(part), func(j int, id int64) { part[j].T.ID = id })
		}
		if err != nil {
			return fmt.Errorf("insert timers: %w", err)
		}
		if !hourglass.IsTimerID(part[0].T.ID) {
			return fmt.Errorf("insert timers: id %d is below hourglass.TimerIDBase: the timers table's AUTO_INCREMENT was changed", part[0].T.ID)
		}
	}
	return nil
}

func (t *txn) RearmTimers(ctx context.Context, timers []*batch.Timer) error {
	for _, run := range statementRuns(len(timers), func(j int) int { return timerBytes(timers[j]) }) {
		part := timers[run[0]:run[1]]
		args := make([]any, 0, 10*len(part))
		for _, bt := range part {
			tm := bt.T
			args = append(args, tm.ID, []byte(tm.Key), string(tm.Status), hourglass.UnixMilli(tm.FireAt), nullMs(tm.FiredAt), nullBytes(tm.Payload),
				nullID(tm.WebhookID), bt.Hash, hourglass.UnixMilli(tm.CreatedAt), hourglass.UnixMilli(tm.UpdatedAt))
		}
		// Every row exists and is locked: each is an update (see
		// UpdateOrders).
		if _, err := t.tx.ExecContext(ctx, `INSERT INTO timers (id, timer_key, status, fire_at, fired_at, payload, webhook_id, request_hash, created_at, updated_at) VALUES `+
			rowsOf(len(part), `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)+`
ON DUPLICATE KEY UPDATE status = VALUES(status), fire_at = VALUES(fire_at), fired_at = VALUES(fired_at), payload = VALUES(payload),
	webhook_id = VALUES(webhook_id), request_hash = VALUES(request_hash), updated_at = VALUES(updated_at)`, args...); err != nil {
			return fmt.Errorf("re-arm timers: %w", err)
		}
	}
	return nil
}

func (t *txn) SetTimers(ctx context.Context, status hourglass.TimerStatus, ids []int64, now time.Time) error {
	nowMs := hourglass.UnixMilli(now)
	query := `UPDATE timers SET status = 'cancelled', updated_at = ? WHERE id IN (`
	args := []any{nowMs}
	if status == hourglass.TimerFired {
		query = `UPDATE timers SET status = 'fired', fired_at = ?, updated_at = ? WHERE id IN (`
		args = append(args, nowMs)
	}
	if _, err := t.tx.ExecContext(ctx, query+placeholders(len(ids))+`)`, append(args, anys(ids)...)...); err != nil {
		return fmt.Errorf("set timers %s: %w", status, err)
	}
	return nil
}

// InsertEvents inserts the events with one multi-row INSERT, or several
// when timer.fired bodies make it long (statementRuns).
func (t *txn) InsertEvents(ctx context.Context, events []*batch.Event, now time.Time) error {
	nowMs := hourglass.UnixMilli(now)
	for _, run := range statementRuns(len(events), func(j int) int { return 2 * len(events[j].Body) }) {
		part := events[run[0]:run[1]]
		// Orders' events mostly have no body: a statement without one
		// leaves the column out.
		withBody := slices.ContainsFunc(part, func(e *batch.Event) bool { return e.Body != nil })
		// A close's or fire's provenance (hourglass.Closer) likewise.
		withBy := slices.ContainsFunc(part, func(e *batch.Event) bool { return e.By.Cause != "" })
		args := make([]any, 0, 7*len(part))
		for _, e := range part {
			args = append(args, e.ID, string(e.Type), e.Subject, nowMs)
			if withBody {
				args = append(args, nullBytes(e.Body))
			}
			if withBy {
				cause, node := closerColumns(e.By)
				args = append(args, cause, node)
			}
		}
		query := `INSERT INTO events (id, type, order_id, created_at) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?)`)
		switch {
		case withBody && withBy:
			query = `INSERT INTO events (id, type, order_id, created_at, body, cause, node) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?, ?, ?, ?)`)
		case withBody:
			query = `INSERT INTO events (id, type, order_id, created_at, body) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?, ?)`)
		case withBy:
			query = `INSERT INTO events (id, type, order_id, created_at, cause, node) VALUES ` + rowsOf(len(part), `(?, ?, ?, ?, ?, ?)`)
		}
		res, err := t.tx.ExecContext(ctx, query, args...)
		if err == nil {
			err = t.inserted(res, len(part), func(j int, seq int64) { part[j].Seq = seq })
		}
		if err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
	}
	return nil
}

// DeferFanOut writes one fanout_pending row listing seqs.
func (t *txn) DeferFanOut(ctx context.Context, events []*batch.Event) error {
	seqs := batch.Seqs(events)
	var list []byte
	for i, seq := range seqs {
		if i > 0 {
			list = append(list, ',')
		}
		list = strconv.AppendInt(list, seq, 10)
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO fanout_pending (seqs) VALUES (?)`, string(list)); err != nil {
		return fmt.Errorf("defer fan-out: %w", err)
	}
	return nil
}

func (t *txn) InsertDeliveries(ctx context.Context, events []*batch.Event, now time.Time) error {
	args := make([]any, 0, 4*len(events))
	for _, e := range events {
		args = append(args, e.WebhookID, e.Seq, e.Subject, hourglass.UnixMilli(now))
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at) VALUES `+
		rowsOf(len(events), `(?, ?, ?, 'pending', 0, ?)`), args...); err != nil {
		return fmt.Errorf("insert deliveries: %w", err)
	}
	return nil
}

// FanOut reads the subscriptions with a shared lock, so that a webhook
// deleted concurrently waits for this commit and then deletes its
// deliveries too.
func (t *txn) FanOut(ctx context.Context, events []*batch.Event, now time.Time) (int, error) {
	seqs := batch.Seqs(events)
	res, err := t.tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT s.webhook_id, e.seq, e.order_id, 'pending', 0, ? FROM events e
JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
WHERE e.seq IN (`+placeholders(len(seqs))+`) LOCK IN SHARE MODE`, append([]any{hourglass.UnixMilli(now)}, anys(seqs)...)...)
	if err != nil {
		return 0, fmt.Errorf("fan out events: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("fan out events: %w", err)
	}
	return int(n), nil
}

func (t *txn) LockDeliveries(ctx context.Context, ids []int64) ([]*batch.Delivery, error) {
	var out []*batch.Delivery
	if err := eachRow(ctx, t.tx, `SELECT id, attempts, next_attempt_at FROM webhook_deliveries
WHERE id IN (…) AND state = 'pending' ORDER BY id FOR UPDATE`, anys(ids), func(rows *sql.Rows) error {
		var (
			d  batch.Delivery
			at int64
		)
		err := rows.Scan(&d.ID, &d.Attempts, &at)
		d.NextAt = hourglass.FromUnixMilli(at)
		out = append(out, &d)
		return err
	}); err != nil {
		return nil, fmt.Errorf("lock deliveries: %w", err)
	}
	return out, nil
}

func (t *txn) UpdateDelivery(ctx context.Context, d *batch.Delivery, now time.Time) error {
	msg := d.LastError
	if len(msg) > maxLastError {
		msg = msg[:maxLastError]
	}
	var err error
	if d.Dead {
		_, err = t.tx.ExecContext(ctx, `UPDATE webhook_deliveries SET state = 'dead', attempts = ?, last_error = ?, failed_at = ? WHERE id = ?`,
			d.Attempts, []byte(msg), hourglass.UnixMilli(now), d.ID)
	} else {
		_, err = t.tx.ExecContext(ctx, `UPDATE webhook_deliveries SET attempts = ?, last_error = ?, next_attempt_at = ? WHERE id = ?`,
			d.Attempts, []byte(msg), hourglass.UnixMilli(d.NextAt), d.ID)
	}
	if err != nil {
		return fmt.Errorf("record attempts: %w", err)
	}
	return nil
}

func (t *txn) DeleteDeliveries(ctx context.Context, ids []int64) error {
	if _, err := t.tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id IN (`+placeholders(len(ids))+`)`, anys(ids)...); err != nil {
		return fmt.Errorf("record attempts: %w", err)
	}
	return nil
}

func (t *txn) StreamHeads(ctx context.Context, streams []batch.Stream) (map[batch.Stream]hourglass.DeliveryTimer, error) {
	where := make([]any, 0, 2*len(streams))
	for _, st := range streams {
		where = append(where, st.Webhook, st.Order)
	}
	heads := map[batch.Stream]hourglass.DeliveryTimer{}
	if err := eachRow(ctx, t.tx, `SELECT webhook_id, order_id, id, next_attempt_at FROM webhook_deliveries FORCE INDEX (webhook_deliveries_stream)
WHERE state = 'pending' AND (`+repeatJoin(`(webhook_id = ? AND order_id = ?)`, " OR ", len(streams))+`)
ORDER BY webhook_id, order_id, event_seq`, where, func(rows *sql.Rows) error {
		var (
			st     batch.Stream
			id, at int64
		)
		err := rows.Scan(&st.Webhook, &st.Order, &id, &at)
		if _, ok := heads[st]; !ok { // the first of its stream: the earliest event
			heads[st] = hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("next deliveries: %w", err)
	}
	return heads, nil
}

// InsertOutbox moves a re-armed timer's row that is still there.
func (t *txn) InsertOutbox(ctx context.Context, due []hourglass.DueItem) error {
	args := make([]any, 0, 2*len(due))
	for _, d := range due {
		args = append(args, d.ID, hourglass.UnixMilli(d.At))
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO timer_outbox (order_id, deadline) VALUES `+rowsOf(len(due), `(?, ?)`)+`
ON DUPLICATE KEY UPDATE deadline = VALUES(deadline)`, args...); err != nil {
		return fmt.Errorf("insert outbox timers: %w", err)
	}
	return nil
}

func (t *txn) InsertKeys(ctx context.Context, keys []batch.IdempotencyKey, now time.Time) error {
	args := make([]any, 0, 4*len(keys))
	for _, k := range keys {
		args = append(args, []byte(k.Key), nonNilBytes(k.Hash), k.OrderID, hourglass.UnixMilli(now))
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO idempotency_keys (idem_key, request_hash, order_id, created_at) VALUES `+
		rowsOf(len(keys), `(?, ?, ?, ?)`), args...); err != nil {
		return fmt.Errorf("insert idempotency keys: %w", err)
	}
	return nil
}

// Announce writes the order_feed row of the other processes' WatchCreated
// (cluster.go).
func (t *txn) Announce(ctx context.Context, now time.Time, due []hourglass.DueItem) error {
	return t.s.writeFeed(ctx, t.tx, now, due)
}

// rowsOf returns n copies of row joined by ", ".
func rowsOf(n int, row string) string { return repeatJoin(row, ", ", n) }

// repeatJoin returns n copies of s joined by sep.
func repeatJoin(s, sep string, n int) string {
	var b strings.Builder
	b.Grow(n * (len(s) + len(sep)))
	for i := range n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s)
	}
	return b.String()
}

func nullMs(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return hourglass.UnixMilli(t)
}

// closerColumns are an event's cause and node columns: NULL when the
// close's provenance is unknown (the node NULL when not named too).
func closerColumns(by hourglass.Closer) (cause, node any) {
	if by.Cause == "" {
		return nil, nil
	}
	return string(by.Cause), nullString(by.Node)
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

// maxStatementBytes bounds the bytes of timer payloads, keys and event
// bodies one multi-row statement carries. Statements are sent with their
// values inlined (InterpolateParams), as one packet: 512 arms of 64 KiB
// payloads would be 32 MiB, over MariaDB's default max_allowed_packet of
// 16 MiB (and the server drops the connection on a packet too large).
const maxStatementBytes = 4 << 20

// statementRuns splits n rows, of about size(j) bytes each besides their
// fixed columns, into runs [from, to) of at most maxStatementBytes each
// (at least one row each): usually one run of all n.
func statementRuns(n int, size func(j int) int) [][2]int {
	var (
		runs  [][2]int
		from  int
		bytes int
	)
	for j := range n {
		sz := size(j) + 64 // the fixed columns, quoted
		if j > from && bytes+sz > maxStatementBytes {
			runs = append(runs, [2]int{from, j})
			from, bytes = j, 0
		}
		bytes += sz
	}
	if n > from {
		runs = append(runs, [2]int{from, n})
	}
	return runs
}

// timerBytes is about how many bytes a timer's variable columns take in a
// statement: JSON's quotes and backslashes are escaped, so twice its
// payload at most.
func timerBytes(t *batch.Timer) int { return len(t.T.Key) + 2*len(t.T.Payload) + 2*len(t.Hash) }
