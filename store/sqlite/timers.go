package sqlite

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"zombiezen.com/go/sqlite"
)

var _ hourglass.TimerStore = (*Store)(nil)

const timerColumns = `id, key, status, fire_at, fired_at, payload, webhook_id, created_at, updated_at`

func scanTimer(st *sqlite.Stmt) hourglass.Timer {
	t := hourglass.Timer{
		ID:        st.ColumnInt64(0),
		Key:       st.ColumnText(1),
		Status:    hourglass.TimerStatus(st.ColumnText(2)),
		FireAt:    hourglass.FromUnixMilli(st.ColumnInt64(3)),
		WebhookID: st.ColumnInt64(6),
		CreatedAt: hourglass.FromUnixMilli(st.ColumnInt64(7)),
		UpdatedAt: hourglass.FromUnixMilli(st.ColumnInt64(8)),
	}
	if !st.ColumnIsNull(4) {
		t.FiredAt = hourglass.FromUnixMilli(st.ColumnInt64(4))
	}
	if !st.ColumnIsNull(5) {
		t.Payload = json.RawMessage(st.ColumnText(5))
	}
	return t
}

// bindTimerValues binds what an arming writes: ?2 fire_at, ?3 payload
// (NULL for none), ?4 webhook_id (NULL for none), ?5 request_hash, ?6 now.
func bindTimerValues(stmt *sqlite.Stmt, p hourglass.ArmTimerParams, fireMs, nowMs int64) {
	stmt.BindInt64(2, fireMs)
	if p.Payload == nil {
		stmt.BindNull(3)
	} else {
		stmt.BindText(3, string(p.Payload))
	}
	if p.WebhookID == 0 {
		stmt.BindNull(4)
	} else {
		stmt.BindInt64(4, p.WebhookID)
	}
	stmt.BindBytes(5, p.RequestHash)
	stmt.BindInt64(6, nowMs)
}

// ArmTimer implements hourglass.TimerStore. It runs on the single writer as
// three conditional statements, the first that matches winning: re-arm the
// key unless it is scheduled with the same request hash; insert it if it is
// new; otherwise it is a repeat and the timer is read as it is. A repeat
// writes nothing (idempotent); any arming that changed the timer writes
// its id and fire time to the outbox when Config.Outbox is on. Errors:
// invalid_argument (p.Validate, an unknown WebhookID), unavailable.
//
// Every write statement here is OR FAIL: a failed constraint fails the op,
// which rolls back its whole transaction anyway (see op), so a statement
// needs no statement journal to undo itself. Under the default ABORT, the
// RETURNING clause and the table's CHECK and NOT NULL constraints made
// SQLite open one for each statement, and the journal's 64 KiB chunk, too
// large for the allocator ballast (ballast.go), cost an mmap and a munmap
// per statement: most of an arm's CPU.
func (s *Store) ArmTimer(ctx context.Context, p hourglass.ArmTimerParams) (hourglass.Timer, bool, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Timer{}, false, err
	}
	var (
		out     hourglass.Timer
		created bool
	)
	due := func(u *hourglass.DueUpdate) {
		if out.Status == hourglass.TimerScheduled {
			u.Due = append(u.Due, hourglass.DueItem{ID: out.ID, At: out.FireAt})
		}
	}
	err := s.writeDue(ctx, due, func(conn *sqlite.Conn, now time.Time) error {
		var err error
		out, created, err = s.armIn(conn, now, p) // set afresh: the op may be retried alone after a batch failure
		return err
	})
	if err != nil {
		return hourglass.Timer{}, false, err
	}
	return out, created, nil
}

func getTimer(conn *sqlite.Conn, key string) (hourglass.Timer, error) {
	stmt := conn.Prep(`SELECT ` + timerColumns + ` FROM timers WHERE key = ?1`)
	stmt.BindText(1, key)
	var t hourglass.Timer
	found, err := step(stmt, func(st *sqlite.Stmt) { t = scanTimer(st) })
	if err != nil {
		return t, fmt.Errorf("sqlite: get timer %q: %w", key, err)
	}
	if !found {
		return t, plan.TimerNotFound(key)
	}
	return t, nil
}

// armIn runs ArmTimer's statements for p (valid) in the writer's
// transaction at now: ArmTimer's op, and each arm of a batch of timer
// requests (requests.go).
func (s *Store) armIn(conn *sqlite.Conn, now time.Time, p hourglass.ArmTimerParams) (out hourglass.Timer, created bool, err error) {
	nowMs := hourglass.UnixMilli(now)
	fireMs := nowMs + p.Delay.Milliseconds()
	if !p.FireAt.IsZero() {
		fireMs = max(hourglass.UnixMilli(p.FireAt), nowMs)
	}
	if p.WebhookID != 0 {
		stmt := conn.Prep(`SELECT 1 FROM webhooks WHERE id = ?1`)
		stmt.BindInt64(1, p.WebhookID)
		found, err := step(stmt, nil)
		if err != nil {
			return out, false, fmt.Errorf("sqlite: arm timer %q: look up webhook %d: %w", p.Key, p.WebhookID, err)
		}
		if !found {
			return out, false, plan.UnknownWebhook(p.WebhookID)
		}
	}
	var scanned bool
	scan := func(st *sqlite.Stmt) { out, scanned = scanTimer(st), true }
	stmt := conn.Prep(`UPDATE OR FAIL timers SET status = 'scheduled', fire_at = ?2, fired_at = NULL, payload = ?3, webhook_id = ?4,
request_hash = ?5, updated_at = ?6
WHERE key = ?1 AND NOT (status = 'scheduled' AND request_hash = ?5) RETURNING ` + timerColumns)
	stmt.BindText(1, p.Key)
	bindTimerValues(stmt, p, fireMs, nowMs)
	if _, err := step(stmt, scan); err != nil {
		return out, false, fmt.Errorf("sqlite: re-arm timer %q: %w", p.Key, err)
	}
	if !scanned {
		stmt = conn.Prep(`INSERT OR FAIL INTO timers (id, key, status, fire_at, payload, webhook_id, request_hash, created_at, updated_at)
VALUES ((SELECT coalesce(max(id), ?7 - 1) + 1 FROM timers), ?1, 'scheduled', ?2, ?3, ?4, ?5, ?6, ?6)
ON CONFLICT (key) DO NOTHING RETURNING ` + timerColumns)
		stmt.BindText(1, p.Key)
		bindTimerValues(stmt, p, fireMs, nowMs)
		stmt.BindInt64(7, hourglass.TimerIDBase)
		if _, err := step(stmt, scan); err != nil {
			return out, false, fmt.Errorf("sqlite: insert timer %q: %w", p.Key, err)
		}
		created = scanned
	}
	if !scanned {
		// Scheduled with the same hash: a repeat, nothing to write.
		t, err := getTimer(conn, p.Key)
		return t, false, err
	}
	if s.cfg.Outbox {
		stmt := conn.Prep(`INSERT OR FAIL INTO timer_outbox (order_id, deadline) VALUES (?1, ?2)
ON CONFLICT (order_id) DO UPDATE SET deadline = excluded.deadline`)
		stmt.BindInt64(1, out.ID)
		stmt.BindInt64(2, fireMs)
		if _, err := step(stmt, nil); err != nil {
			return out, false, fmt.Errorf("sqlite: write outbox timer of %q: %w", p.Key, err)
		}
	}
	return out, created, nil
}

// CancelTimer implements hourglass.TimerStore: one conditional update on
// the writer (OR FAIL, as ArmTimer's); a cancelled timer is returned as it
// is (idempotent). Errors: not_found, timer_fired.
func (s *Store) CancelTimer(ctx context.Context, key string) (hourglass.Timer, error) {
	var out hourglass.Timer
	gone := func(u *hourglass.DueUpdate) { u.Gone = append(u.Gone, out.ID) }
	err := s.writeDue(ctx, gone, func(conn *sqlite.Conn, now time.Time) error {
		var err error
		out, err = cancelIn(conn, now, key)
		return err
	})
	return out, err
}

// cancelIn runs CancelTimer's statements in the writer's transaction at
// now: CancelTimer's op, and each cancel of a batch of timer requests.
func cancelIn(conn *sqlite.Conn, now time.Time, key string) (hourglass.Timer, error) {
	var out hourglass.Timer
	stmt := conn.Prep(`UPDATE OR FAIL timers SET status = 'cancelled', updated_at = ?2 WHERE key = ?1 AND status = 'scheduled' RETURNING ` + timerColumns)
	stmt.BindText(1, key)
	stmt.BindInt64(2, hourglass.UnixMilli(now))
	found, err := step(stmt, func(st *sqlite.Stmt) { out = scanTimer(st) })
	if err != nil {
		return out, fmt.Errorf("sqlite: cancel timer %q: %w", key, err)
	}
	if found {
		return out, nil
	}
	cur, err := getTimer(conn, key)
	if err != nil {
		return out, err
	}
	if cur.Status == hourglass.TimerFired {
		return out, plan.TimerFired(key, cur.FiredAt)
	}
	return cur, nil // cancelled already
}

// FireTimers implements hourglass.TimerStore. Like CloseOrders it jumps the
// queue of API writes (a burst of arms cannot make a fire late) and is
// one SELECT finds the listed timers still scheduled and due, a one-row
// UPDATE fires each, one event row per fired timer (each with its body),
// then the deliveries of all the events of timers without a webhook of
// their own with one INSERT … SELECT per subscribed type, and one per timer
// that has its own, all in the writer's transaction. Ids of orders, unknown ids and timers not scheduled
// and due are skipped.
func (s *Store) FireTimers(ctx context.Context, ids []int64) ([]hourglass.FiredTimer, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	list := jsonIDs(ids)
	var (
		fired  []hourglass.FiredTimer
		fanned int // deliveries created with the events
	)
	err := s.writeUrgent(ctx, len(ids), func(conn *sqlite.Conn, now time.Time) error {
		fired, fanned = fired[:0], 0 // the op may be retried alone after a batch failure
		nowMs := hourglass.UnixMilli(now)
		// The due timers are read with the ids as the outer loop (CROSS
		// JOIN), each a rowid lookup, not a walk of the (status, fire_at)
		// index, which in a burst holds every timer due at this instant.
		// Then each is fired by a one-row UPDATE. One UPDATE … WHERE id IN
		// (…) RETURNING for the batch opened two ephemeral tables (the IN
		// list and the returned rows), each with a 60 KiB page cache that
		// modernc's allocator maps and unmaps per statement (too large for
		// the ballast): a fifth of the CPU of small batches, which is what
		// a steady stream of timers hands this. A one-row UPDATE by rowid
		// needs neither, nor a statement journal (OR FAIL anyway).
		stmt := conn.Prep(`SELECT t.id, t.key, t.status, t.fire_at, t.fired_at, t.payload, t.webhook_id, t.created_at, t.updated_at
FROM json_each(?1) AS j CROSS JOIN timers AS t ON t.id = j.value WHERE t.status = 'scheduled' AND t.fire_at <= ?2`)
		defer stmt.Reset()
		stmt.BindText(1, string(list))
		stmt.BindInt64(2, nowMs)
		var due []hourglass.Timer
		for {
			row, err := stmt.Step()
			if err != nil {
				return fmt.Errorf("sqlite: fire %d timers: %w", len(ids), err)
			}
			if !row {
				break
			}
			due = append(due, scanTimer(stmt))
		}
		stmt.Reset()
		timers := due[:0]
		for _, t := range due {
			stmt := conn.Prep(`UPDATE OR FAIL timers SET status = 'fired', fired_at = ?2, updated_at = ?2 WHERE id = ?1 AND status = 'scheduled'`)
			stmt.BindInt64(1, t.ID)
			stmt.BindInt64(2, nowMs)
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: fire timer %q: %w", t.Key, err)
			}
			if conn.Changes() == 0 {
				continue // listed twice: fired just now
			}
			t.Status, t.FiredAt, t.UpdatedAt = hourglass.TimerFired, hourglass.FromUnixMilli(nowMs), hourglass.FromUnixMilli(nowMs)
			timers = append(timers, t)
		}
		if len(timers) == 0 {
			return nil // all fired, cancelled, re-armed for later or not timers
		}
		// The events of timers without a webhook of their own first, so
		// their seqs are one range for the fan-out.
		slices.SortStableFunc(timers, func(a, b hourglass.Timer) int { return cmp.Compare(min(a.WebhookID, 1), min(b.WebhookID, 1)) })
		seqs := make([]int64, len(timers))
		for i, t := range timers {
			seq, err := writeTimerEvent(conn, nowMs, t)
			if err != nil {
				return err
			}
			seqs[i] = seq
			fired = append(fired, hourglass.FiredTimer{ID: t.ID, Key: t.Key, FireAt: t.FireAt, FiredAt: t.FiredAt})
		}
		if s.webhookCount(conn) <= 0 {
			return nil
		}
		// timers[:plain] have no webhook of their own.
		plain := slices.IndexFunc(timers, func(t hourglass.Timer) bool { return t.WebhookID != 0 })
		if plain < 0 {
			plain = len(timers)
		}
		if plain > 0 {
			n, err := fanOutEvents(conn, nowMs, hourglass.EventTimerFired, seqs[0], seqs[plain-1])
			if err != nil {
				return err
			}
			fanned = n
		}
		for i, t := range timers[plain:] {
			stmt := conn.Prep(`INSERT OR FAIL INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at)
SELECT id, ?1, ?2, 'pending', 0, ?3 FROM webhooks WHERE id = ?4`)
			stmt.BindInt64(1, seqs[plain+i])
			stmt.BindInt64(2, t.ID)
			stmt.BindInt64(3, nowMs)
			stmt.BindInt64(4, t.WebhookID)
			if _, err := step(stmt, nil); err != nil {
				return fmt.Errorf("sqlite: deliver timer.fired event of %q to webhook %d: %w", t.Key, t.WebhookID, err)
			}
			fanned += conn.Changes()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if fanned > 0 {
		s.w.NotifyDeliveries()
	}
	return fired, nil
}

// writeTimerEvent writes the timer.fired event of t, which has just fired,
// with its body, and returns its seq.
func writeTimerEvent(conn *sqlite.Conn, nowMs int64, t hourglass.Timer) (int64, error) {
	id := hourglass.NewEventID()
	body := hourglass.MarshalTimerEvent(id, t)
	if body == nil {
		return 0, fmt.Errorf("sqlite: fire timer %q: its payload is not JSON", t.Key)
	}
	stmt := conn.Prep(`INSERT OR FAIL INTO events (id, type, order_id, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5)`)
	stmt.BindText(1, id)
	stmt.BindText(2, string(hourglass.EventTimerFired))
	stmt.BindInt64(3, t.ID)
	stmt.BindInt64(4, nowMs)
	stmt.BindText(5, string(body))
	if _, err := step(stmt, nil); err != nil {
		return 0, fmt.Errorf("sqlite: write timer.fired event of %q: %w", t.Key, err)
	}
	return conn.LastInsertRowID(), nil
}

// columnBytes returns a copy of a column's bytes, nil when it is NULL.
func columnBytes(st *sqlite.Stmt, col int) []byte {
	if st.ColumnIsNull(col) {
		return nil
	}
	return []byte(st.ColumnText(col))
}
