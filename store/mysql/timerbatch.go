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
	"github.com/hourglass/hourglass/store/internal/plan"
)

// The named timers' part of a group commit (batch.go): ArmTimer,
// CancelTimer and FireTimers queue an op like the order writes, and a batch
// runs them with the orders in its one transaction:
//
//   - step 3 locks, after the products, the timers the batch arms or
//     cancels by key (SELECT … WHERE timer_key IN (…) ORDER BY timer_key FOR
//     UPDATE), then those it fires by id (… WHERE id IN (…) ORDER BY id FOR
//     UPDATE); under READ COMMITTED a key with no row locks nothing;
//   - step 4 reads which of the webhooks the arms name exist (no lock: a
//     webhook deleted later leaves its timers dangling, as documented);
//   - step 5 decides each timer op in queue order on the locked rows, in
//     memory, so the same key twice in one batch behaves as two calls one
//     after the other: a second arming of a key the batch creates re-arms
//     it (created=false), a cancel after it cancels it; a refused op
//     (unknown webhook, not found, fired) writes nothing and fails alone;
//   - step 6 writes each timer row once: one multi-row INSERT of the
//     created timers, in key order (consecutive ids, as for orders), one
//     upsert of the re-armed ones, one UPDATE … WHERE id IN (…) for the
//     fired and one for the cancelled; the timer.fired events go into the
//     batch's one INSERT of events (with their bodies), their deliveries
//     into its fan-out, the armed timers' outbox rows and order_feed entries
//     into the batch's one statement of each.
//
// Exactly one arming creates a key, however many store values or
// processes race it: each finds no row, the first insert to commit wins,
// and the others' inserts fail with a duplicate key (1062, or a lost
// certification on Galera); their batches run again, find its row and
// re-arm it.

// lockedTimer is a timer row the batch locked, or one it creates, changed
// in memory.
type lockedTimer struct {
	t    hourglass.Timer // ID 0 until a created timer is inserted
	hash []byte          // request_hash
	// exists: the row was there when locked; otherwise the batch inserts it.
	exists bool
	// armed: armed by the batch, so written whole, and announced (outbox,
	// order_feed) if it is still scheduled at the end of the batch.
	armed bool
	dirty bool // changed by the batch
}

// batchTimers holds the timers of one batch.
type batchTimers struct {
	byKey map[string]*lockedTimer
	byID  map[int64]*lockedTimer
	// armed lists the timers armed by the batch, in the order of their
	// first arming.
	armed []*lockedTimer
	// webhooks holds which of the webhooks named by the arms exist.
	webhooks map[int64]bool
}

// lockTimers locks the rows of keys, then of ids (those still scheduled),
// and reads which of webhookIDs exist. keys and ids may repeat.
func lockTimers(ctx context.Context, tx *sql.Tx, keys []string, ids []int64, webhookIDs []int64) (*batchTimers, error) {
	bt := &batchTimers{byKey: map[string]*lockedTimer{}, byID: map[int64]*lockedTimer{}, webhooks: map[int64]bool{}}
	scan := func(rows *sql.Rows) error {
		var hash []byte
		t, err := scanTimer(rows, &hash)
		lt := &lockedTimer{t: t, hash: hash, exists: true}
		bt.byKey[t.Key], bt.byID[t.ID] = lt, lt
		return err
	}
	if len(keys) > 0 {
		slices.Sort(keys) // bytewise, the order of the VARBINARY key
		args := make([]any, 0, len(keys))
		for _, k := range slices.Compact(keys) {
			args = append(args, []byte(k))
		}
		if err := eachRow(ctx, tx, `SELECT `+timerColumns+`, request_hash FROM timers WHERE timer_key IN (…)
ORDER BY timer_key FOR UPDATE`, args, scan); err != nil {
			return nil, fmt.Errorf("lock timers: %w", err)
		}
	}
	var args []any
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		if bt.byID[id] == nil { // not locked by its key already
			args = append(args, id)
		}
	}
	if len(args) > 0 {
		if err := eachRow(ctx, tx, `SELECT `+timerColumns+`, request_hash FROM timers WHERE id IN (…) AND status = 'scheduled'
ORDER BY id FOR UPDATE`, args, scan); err != nil {
			return nil, fmt.Errorf("lock timers: %w", err)
		}
	}
	if len(webhookIDs) > 0 {
		if err := eachRow(ctx, tx, `SELECT id FROM webhooks WHERE id IN (…)`, anys(webhookIDs), func(rows *sql.Rows) error {
			var id int64
			err := rows.Scan(&id)
			bt.webhooks[id] = true
			return err
		}); err != nil {
			return nil, fmt.Errorf("look up webhooks: %w", err)
		}
	}
	return bt, nil
}

// arm decides an ArmTimer at now, as TimerStore.ArmTimer says. It returns
// the timer the result names (whose ID a created timer gets at its insert).
func (bt *batchTimers) arm(p hourglass.ArmTimerParams, nowMs int64) (*lockedTimer, opResult) {
	lt := bt.byKey[p.Key]
	if lt != nil && lt.t.Status == hourglass.TimerScheduled && bytes.Equal(lt.hash, p.RequestHash) {
		return lt, opResult{timer: lt.t} // a retry of the arming that scheduled it
	}
	if p.WebhookID != 0 && !bt.webhooks[p.WebhookID] {
		return nil, opResult{err: plan.UnknownWebhook(p.WebhookID)}
	}
	now := hourglass.FromUnixMilli(nowMs)
	created := lt == nil
	if created {
		lt = &lockedTimer{t: hourglass.Timer{Key: p.Key, CreatedAt: now}}
		bt.byKey[p.Key] = lt
	}
	if !lt.armed {
		lt.armed = true
		bt.armed = append(bt.armed, lt)
	}
	fireMs := nowMs + p.Delay.Milliseconds()
	if !p.FireAt.IsZero() {
		fireMs = max(hourglass.UnixMilli(p.FireAt), nowMs)
	}
	lt.t.Status, lt.t.FireAt, lt.t.FiredAt, lt.t.UpdatedAt = hourglass.TimerScheduled, hourglass.FromUnixMilli(fireMs), time.Time{}, now
	lt.t.Payload, lt.t.WebhookID = bytes.Clone(p.Payload), p.WebhookID
	lt.hash = nonNilBytes(bytes.Clone(p.RequestHash))
	lt.dirty = true
	return lt, opResult{timer: lt.t, created: created}
}

// cancel decides a CancelTimer at now.
func (bt *batchTimers) cancel(key string, now time.Time) (*lockedTimer, opResult) {
	lt := bt.byKey[key]
	if lt == nil {
		return nil, opResult{err: plan.TimerNotFound(key)}
	}
	switch lt.t.Status {
	case hourglass.TimerFired:
		return nil, opResult{err: plan.TimerFired(key, lt.t.FiredAt)}
	case hourglass.TimerScheduled:
		lt.t.Status, lt.t.UpdatedAt = hourglass.TimerCancelled, now
		lt.dirty = true
	}
	return lt, opResult{timer: lt.t}
}

// fire decides a FireTimers of ids (ascending) at now: each still
// scheduled and due is fired, with its timer.fired event, which it returns.
func (bt *batchTimers) fire(ids []int64, now time.Time) ([]hourglass.FiredTimer, []batchEvent, error) {
	var (
		fired  []hourglass.FiredTimer
		events []batchEvent
	)
	for _, id := range ids {
		lt := bt.byID[id]
		if lt == nil || lt.t.Status != hourglass.TimerScheduled || lt.t.FireAt.After(now) {
			continue // fired, cancelled, unknown or not yet due: nothing to do
		}
		lt.t.Status, lt.t.FiredAt, lt.t.UpdatedAt = hourglass.TimerFired, now, now
		lt.dirty = true
		evID := hourglass.NewEventID()
		body := hourglass.MarshalTimerEvent(evID, lt.t)
		if body == nil {
			return nil, nil, fmt.Errorf("timer %q: its stored payload is not valid JSON", lt.t.Key)
		}
		events = append(events, batchEvent{typ: hourglass.EventTimerFired, newIdx: -1, orderID: id, id: evID, body: body, webhookID: lt.t.WebhookID})
		fired = append(fired, hourglass.FiredTimer{ID: id, Key: lt.t.Key, FireAt: lt.t.FireAt, FiredAt: now})
	}
	return fired, events, nil
}

// write inserts the created timers (giving them their ids), then writes
// every changed row once: the re-armed ones whole with one upsert, the
// others (fired or cancelled, with updated_at now) with one UPDATE per
// status. increment is @@auto_increment_increment.
func (bt *batchTimers) write(ctx context.Context, tx *sql.Tx, nowMs, increment int64) error {
	var news, rearmed []*lockedTimer
	for _, lt := range bt.armed {
		if lt.exists {
			rearmed = append(rearmed, lt)
		} else {
			news = append(news, lt)
		}
	}
	if len(news) > 0 {
		// In key order: two batches creating some of the same keys wait for
		// each other in one order rather than deadlock.
		slices.SortFunc(news, func(a, b *lockedTimer) int { return strings.Compare(a.t.Key, b.t.Key) })
		for _, run := range statementRuns(len(news), func(j int) int { return timerBytes(news[j]) }) {
			part := news[run[0]:run[1]]
			args := make([]any, 0, 8*len(part))
			for _, lt := range part {
				t := lt.t
				args = append(args, []byte(t.Key), string(t.Status), hourglass.UnixMilli(t.FireAt), nullBytes(t.Payload), nullID(t.WebhookID), lt.hash,
					hourglass.UnixMilli(t.CreatedAt), hourglass.UnixMilli(t.UpdatedAt))
			}
			// A key another batch committed since step 3 fails here with a
			// duplicate key (1062): the batch runs again and re-arms its row.
			res, err := tx.ExecContext(ctx, `INSERT INTO timers (timer_key, status, fire_at, payload, webhook_id, request_hash, created_at, updated_at) VALUES `+
				rowsOf(len(part), `(?, ?, ?, ?, ?, ?, ?, ?)`), args...)
			if err != nil {
				return fmt.Errorf("insert timers: %w", err)
			}
			first, err := res.LastInsertId() // consecutive ids, as for the batch's orders
			if err != nil {
				return fmt.Errorf("insert timers: %w", err)
			}
			if n, err := res.RowsAffected(); err != nil || n != int64(len(part)) {
				return fmt.Errorf("insert timers: %d rows inserted, want %d (%v)", n, len(part), err)
			}
			if !hourglass.IsTimerID(first) {
				return fmt.Errorf("insert timers: id %d is below hourglass.TimerIDBase: the timers table's AUTO_INCREMENT was changed", first)
			}
			for j, lt := range part {
				lt.t.ID = first + int64(j)*increment
				bt.byID[lt.t.ID] = lt
			}
		}
	}
	for _, run := range statementRuns(len(rearmed), func(j int) int { return timerBytes(rearmed[j]) }) {
		part := rearmed[run[0]:run[1]]
		args := make([]any, 0, 10*len(part))
		for _, lt := range part {
			t := lt.t
			args = append(args, t.ID, []byte(t.Key), string(t.Status), hourglass.UnixMilli(t.FireAt), nullMs(t.FiredAt), nullBytes(t.Payload),
				nullID(t.WebhookID), lt.hash, hourglass.UnixMilli(t.CreatedAt), hourglass.UnixMilli(t.UpdatedAt))
		}
		// Every row exists and is locked: each is an update (see
		// updateOrders).
		if _, err := tx.ExecContext(ctx, `INSERT INTO timers (id, timer_key, status, fire_at, fired_at, payload, webhook_id, request_hash, created_at, updated_at) VALUES `+
			rowsOf(len(part), `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)+`
ON DUPLICATE KEY UPDATE status = VALUES(status), fire_at = VALUES(fire_at), fired_at = VALUES(fired_at), payload = VALUES(payload),
	webhook_id = VALUES(webhook_id), request_hash = VALUES(request_hash), updated_at = VALUES(updated_at)`, args...); err != nil {
			return fmt.Errorf("re-arm timers: %w", err)
		}
	}
	var (
		changed          []int64
		fired, cancelled []any
	)
	for id, lt := range bt.byID {
		if lt.exists && !lt.armed && lt.dirty {
			changed = append(changed, id)
		}
	}
	slices.Sort(changed)
	for _, id := range changed {
		switch bt.byID[id].t.Status {
		case hourglass.TimerFired:
			fired = append(fired, id)
		case hourglass.TimerCancelled:
			cancelled = append(cancelled, id)
		}
	}
	if len(fired) > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE timers SET status = 'fired', fired_at = ?, updated_at = ? WHERE id IN (`+placeholders(len(fired))+`)`,
			append([]any{nowMs, nowMs}, fired...)...); err != nil {
			return fmt.Errorf("fire timers: %w", err)
		}
	}
	if len(cancelled) > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE timers SET status = 'cancelled', updated_at = ? WHERE id IN (`+placeholders(len(cancelled))+`)`,
			append([]any{nowMs}, cancelled...)...); err != nil {
			return fmt.Errorf("cancel timers: %w", err)
		}
	}
	return nil
}

// announced returns the timers armed by the batch that are still
// scheduled, for the outbox and order_feed, once write gave them ids.
func (bt *batchTimers) announced() []hourglass.DueItem {
	var out []hourglass.DueItem
	for _, lt := range bt.armed {
		if lt.t.Status == hourglass.TimerScheduled {
			out = append(out, hourglass.DueItem{ID: lt.t.ID, At: lt.t.FireAt})
		}
	}
	return out
}

// fanOut writes the deliveries of the batch's inserted events, due at
// nowMs, and returns how many it wrote. An event with a webhookID (a timer's that names one) goes to that
// webhook only, if it still exists: its row is read with a shared lock, so
// a concurrent DeleteWebhook waits for this commit and then deletes the
// delivery. The others go to the webhooks subscribed now (when subscribed
// says any subscription exists), read with a shared lock for the same
// reason. Webhook rows are locked before subscriptions, in DeleteWebhook's
// order.
func fanOut(ctx context.Context, tx *sql.Tx, events []batchEvent, nowMs int64, subscribed bool) (int, error) {
	var (
		pinnedIDs []int64 // the webhooks named by events
		seqs      = []any{nowMs}
		fanned    int
	)
	for _, e := range events {
		if e.webhookID != 0 {
			pinnedIDs = append(pinnedIDs, e.webhookID)
		} else {
			seqs = append(seqs, e.seq)
		}
	}
	if len(pinnedIDs) > 0 {
		slices.Sort(pinnedIDs)
		pinned := make([]any, 0, len(pinnedIDs))
		for _, id := range slices.Compact(pinnedIDs) {
			pinned = append(pinned, id)
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM webhooks WHERE id IN (`+placeholders(len(pinned))+`) ORDER BY id LOCK IN SHARE MODE`, pinned...)
		if err != nil {
			return 0, fmt.Errorf("lock webhooks: %w", err)
		}
		exists := map[int64]bool{}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, fmt.Errorf("lock webhooks: %w", err)
			}
			exists[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("lock webhooks: %w", err)
		}
		var args []any
		for _, e := range events {
			if e.webhookID != 0 && exists[e.webhookID] {
				args = append(args, e.webhookID, e.seq, e.orderID, nowMs)
			}
		}
		if len(args) > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at) VALUES `+
				rowsOf(len(args)/4, `(?, ?, ?, 'pending', 0, ?)`), args...); err != nil {
				return 0, fmt.Errorf("insert deliveries: %w", err)
			}
			fanned += len(args) / 4
		}
	}
	if len(seqs) > 1 && subscribed {
		res, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT s.webhook_id, e.seq, e.order_id, 'pending', 0, ? FROM events e
JOIN webhook_subscriptions s ON s.type IN (e.type, '*')
WHERE e.seq IN (`+placeholders(len(seqs)-1)+`) LOCK IN SHARE MODE`, seqs...)
		if err != nil {
			return 0, fmt.Errorf("fan out events: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("fan out events: %w", err)
		}
		fanned += int(n)
	}
	return fanned, nil
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

// timerBytes is about how many bytes lt's variable columns take in a
// statement: JSON's quotes and backslashes are escaped, so twice its
// payload at most.
func timerBytes(lt *lockedTimer) int { return len(lt.t.Key) + 2*len(lt.t.Payload) + 2*len(lt.hash) }
