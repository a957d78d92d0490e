package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/jackc/pgx/v5"
)

// Named timers (hourglass.TimerStore; migration 0003). Arms, cancels and
// fires go through the group-commit writer (writer.go) like the order
// writes: a batch's timer writes are a few set-based statements in its one
// transaction (see timerWrites), so thousands of arms a second cost one
// commit (one fsync) per batch, and the timers armed are announced in the
// batch's one created-orders NOTIFY with its created orders. (Each in its
// own transaction, with a NOTIFY each, the arms' commits queued one by one
// on the server's lock of the notify queue; see BENCHMARKS.md, Timers.)
//
// A timer's id is at or above hourglass.TimerIDBase, so it rides unchanged
// in the columns and messages that carry order ids: timer_outbox.order_id,
// the created-orders NOTIFY (cluster.go), and events' and deliveries'
// order_id. A timer.fired event stores its body (events.body): the timer may
// be re-armed after it fired, so the body cannot be rendered later from the
// timer's row the way an order event's is from its order's.

var _ hourglass.TimerStore = (*Store)(nil)

// timerColumns are a timer's columns, in scanTimer's order, of the timers
// table aliased t.
const timerColumns = `t.id, t.key, t.status, t.fire_at, t.fired_at, t.payload, t.webhook_id, t.created_at, t.updated_at`

// scanTimer scans timerColumns followed by extra destinations.
func scanTimer(row pgx.Row, extra ...any) (hourglass.Timer, error) {
	t, _, err := scanOptTimer(row, extra...)
	return t, err
}

// scanOptTimer is scanTimer for columns that may all be NULL (an outer
// join that found no timer): found is false then.
func scanOptTimer(row pgx.Row, extra ...any) (t hourglass.Timer, found bool, err error) {
	var (
		id, fireAt, createdAt, updated *int64
		key, status, payload           *string
		firedAt, webhookID             *int64
	)
	dest := append([]any{&id, &key, &status, &fireAt, &firedAt, &payload, &webhookID, &createdAt, &updated}, extra...)
	if err := row.Scan(dest...); err != nil {
		return t, false, err
	}
	if id == nil || key == nil || status == nil || fireAt == nil || createdAt == nil || updated == nil {
		return t, false, nil
	}
	t.ID, t.Key, t.Status = *id, *key, hourglass.TimerStatus(*status)
	t.FireAt, t.CreatedAt, t.UpdatedAt = hourglass.FromUnixMilli(*fireAt), hourglass.FromUnixMilli(*createdAt), hourglass.FromUnixMilli(*updated)
	if firedAt != nil {
		t.FiredAt = hourglass.FromUnixMilli(*firedAt)
	}
	if payload != nil {
		t.Payload = json.RawMessage(*payload)
	}
	if webhookID != nil {
		t.WebhookID = *webhookID
	}
	return t, true, nil
}

// armArgs is an arm's params as the arm statement takes them.
type armArgs struct {
	key       string
	fireAt    *int64 // unix ms; nil: now + delay
	delay     int64  // ms
	payload   *string
	webhookID *int64
	hash      []byte
}

func newArmArgs(p hourglass.ArmTimerParams) armArgs {
	a := armArgs{key: p.Key, delay: p.Delay.Milliseconds(), hash: p.RequestHash}
	if !p.FireAt.IsZero() {
		ms := hourglass.UnixMilli(p.FireAt)
		a.fireAt = &ms
	}
	if p.Payload != nil {
		payload := string(p.Payload)
		a.payload = &payload
	}
	if p.WebhookID != 0 {
		id := p.WebhookID
		a.webhookID = &id
	}
	if a.hash == nil {
		a.hash = []byte{} // NOT NULL; and nil then equals nil, as bytes.Equal has it
	}
	return a
}

const (
	// armTimersSQL creates or re-arms timers of distinct keys, one atomic
	// upsert whichever process races it: exactly one INSERT of a key wins,
	// the others become its UPDATE. The rows are taken in key order, so two
	// batches lock the keys they share in the same order. Per timer: $3 is
	// FireAt in unix ms (NULL: now + $4 ms), a FireAt in the past meaning
	// now; an arm naming a webhook that does not exist is left out (ok
	// false). The UPDATE is skipped for a scheduled timer armed with the
	// same request hash (a client's retry): then no row comes back from the
	// upsert, but ON CONFLICT has locked the row all the same, and
	// armedReadSQL reads it. xmax is 0 on a row this statement inserted.
	// The outbox rows of the timers it changed, as created orders write
	// theirs; a re-arm replaces the fire time of a row not yet relayed. One
	// row per input: its timer's columns (NULL unless changed), created,
	// key and ok.
	armTimersSQL = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms), v AS (
	SELECT v.*, (v.webhook_id IS NULL OR EXISTS (SELECT 1 FROM webhooks w WHERE w.id = v.webhook_id)) AS ok
	FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bytea[]) AS v(key, fire_at, delay, payload, webhook_id, hash)
), a AS (
	INSERT INTO timers AS t (key, status, fire_at, payload, webhook_id, request_hash, created_at, updated_at)
	SELECT v.key, 'scheduled', CASE WHEN v.fire_at IS NULL THEN now.ms + v.delay ELSE GREATEST(v.fire_at, now.ms) END,
		v.payload, v.webhook_id, v.hash, now.ms, now.ms
	FROM v, now WHERE v.ok ORDER BY v.key
	ON CONFLICT (key) DO UPDATE SET status = 'scheduled', fire_at = excluded.fire_at, fired_at = NULL,
		payload = excluded.payload, webhook_id = excluded.webhook_id, request_hash = excluded.request_hash,
		updated_at = excluded.updated_at
	WHERE NOT (t.status = 'scheduled' AND t.request_hash = excluded.request_hash)
	RETURNING ` + timerColumns + `, t.xmax = 0 AS created
), o AS (
	INSERT INTO timer_outbox (order_id, deadline) SELECT a.id, a.fire_at FROM a WHERE $8::boolean
	ON CONFLICT (order_id) DO UPDATE SET deadline = excluded.deadline
)
SELECT a.id, a.key, a.status, a.fire_at, a.fired_at, a.payload, a.webhook_id, a.created_at, a.updated_at, a.created, v.key, v.ok
FROM v LEFT JOIN a ON a.key = v.key`
	// armedReadSQL reads, in a statement after armTimersSQL (whose own
	// snapshot may predate a row another transaction committed before the
	// upsert locked it), the listed timers this transaction has not
	// written: those the upsert left unchanged, as they stay until commit.
	armedReadSQL = `SELECT ` + timerColumns + ` FROM timers t
WHERE t.key IN (SELECT unnest($1::text[])) AND NOT (t.xmin = pg_current_xact_id()::xid)`

	// A cancel locks the listed timers (key order), then moves the
	// scheduled ones to cancelled with the now read after the locks; the
	// state test is wrapped in IS TRUE so that only the key's index serves
	// it (see closeSQL).
	cancelLockSQL = `SELECT ` + timerColumns + ` FROM timers t WHERE t.key IN (SELECT unnest($1::text[])) ORDER BY t.key FOR UPDATE OF t`
	cancelSQL     = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms)
UPDATE timers t SET status = 'cancelled', updated_at = now.ms FROM now
WHERE t.key IN (SELECT unnest($2::text[])) AND (t.status = 'scheduled') IS TRUE RETURNING ` + timerColumns

	// The fire locks the listed timers in id order first, so two nodes
	// firing overlapping lists (a partition changing hands) cannot
	// deadlock; "now" is read after the locks are held, and the state and
	// time test is wrapped in IS TRUE so that only the primary key serves
	// it (see closeSQL).
	fireLockSQL = `SELECT 1 FROM timers WHERE id = ANY($1) ORDER BY id FOR UPDATE`
	fireSQL     = `WITH now AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ms)
UPDATE timers t SET status = 'fired', fired_at = now.ms, updated_at = now.ms FROM now
WHERE t.id = ANY($2) AND (t.status = 'scheduled' AND t.fire_at <= now.ms) IS TRUE
RETURNING ` + timerColumns
	// The fired timers' events, with their stored bodies, and their
	// deliveries: to the timer's own webhook if it names one (none if
	// that webhook was deleted), else to every webhook subscribed to
	// timer.fired or "*"; each due at the event's time like an order
	// event's. A NOTIFY wakes other processes' delivery engines at commit.
	timerEventsSQL = `WITH v AS (
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[]) AS v(id, timer_id, at, body, webhook_id)
), e AS (
	INSERT INTO events (id, type, order_id, created_at, body)
	SELECT v.id, 'timer.fired', v.timer_id, v.at, v.body FROM v
	RETURNING seq, order_id, created_at
), d AS (
	INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, next_attempt_at)
	SELECT h.id, e.seq, e.order_id, 'pending', e.created_at
	FROM e JOIN v ON v.timer_id = e.order_id
	CROSS JOIN LATERAL (
		SELECT w.id FROM webhooks w WHERE w.id = v.webhook_id
		UNION ALL
		SELECT s.webhook_id FROM webhook_subscriptions s WHERE v.webhook_id IS NULL AND s.type IN ('timer.fired', '*')
	) h
	RETURNING 1
), n AS (
	SELECT pg_notify($6, '') FROM (SELECT 1 FROM d LIMIT 1) AS x
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM n)`
)

// ArmTimer implements hourglass.TimerStore, group-committed (see
// timerWrites): one upsert, so concurrent arms of a key from any number of
// connections and processes create it once. An arm that changed the timer
// writes its outbox row (Config.Outbox) and is announced on the
// created-orders channel (Config.AnnounceWithin applies, measured from the
// arm's now), both in its transaction. A repeat of the arm that left a
// timer scheduled (same RequestHash) changes nothing: idempotent. Errors:
// invalid_argument, unavailable.
func (s *Store) ArmTimer(ctx context.Context, p hourglass.ArmTimerParams) (hourglass.Timer, bool, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Timer{}, false, err
	}
	o := &op{kind: opArmTimer, arm: newArmArgs(p)}
	if err := s.w.Submit(ctx, writer.Normal, o); err != nil {
		return hourglass.Timer{}, false, err
	}
	return o.timer, o.created, nil
}

// CancelTimer implements hourglass.TimerStore, group-committed: the
// timer's row is locked, then a scheduled one moves to cancelled.
// Idempotent. Errors: not_found, timer_fired, unavailable.
func (s *Store) CancelTimer(ctx context.Context, key string) (hourglass.Timer, error) {
	o := &op{kind: opCancelTimer, key: key}
	if err := s.w.Submit(ctx, writer.Normal, o); err != nil {
		return hourglass.Timer{}, err
	}
	return o.timer, nil
}

// FireTimers implements hourglass.TimerStore, group-committed and, like
// CloseOrders, ahead of the queued API writes (a deadline write): lock,
// fire, and the events with their deliveries in the batch's last round
// trip. Idempotent: a timer no longer scheduled, or not yet due, is
// skipped. Errors: unavailable.
func (s *Store) FireTimers(ctx context.Context, ids []int64) ([]hourglass.FiredTimer, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	o := &op{kind: opFireTimers, ids: ids}
	if err := s.w.Submit(ctx, writer.Urgent, o); err != nil {
		return nil, err
	}
	return o.fired, nil
}

// timerWrites are the timer writes of one group commit (one attempt of
// it). They run first in the batch's first round trip, arms then cancels
// then fires (the order the batch's concurrent writes take effect in), so
// every batch locks timer rows before order rows, idempotency keys and
// products; within the timers, arms and cancels lock by key and fires by
// id, a rare deadlock between two processes being retried like any other.
//
// Arms are set-based: one armTimersSQL per round, the first round taking
// the first arm of each key, the second the second arm of a key armed
// twice in the batch, and so on (ON CONFLICT DO UPDATE cannot touch a row
// twice in one statement), each followed by armedReadSQL for the timers it
// left unchanged.
type timerWrites struct {
	arms, cancels, fires []*op
	// armed are the arms that changed their timer, the last of each key,
	// to announce; armedAt indexes them by key.
	armed   []*op
	armedAt map[string]int
	// fired are the timers the batch fired, for their events.
	fired []hourglass.Timer
	// latest, when set, is each key's timer as an earlier write of the
	// transaction left it, kept across the timerWrites of one transaction
	// (the timer requests' rounds): armedReadSQL skips the rows the
	// transaction wrote, so an arm an earlier round made is found here.
	latest map[string]hourglass.Timer
}

// queue queues the timer writes on b; their callbacks answer the ops.
func (tw *timerWrites) queue(b *pgx.Batch, now any, outbox bool) {
	if len(tw.arms) > 0 {
		tw.queueArms(b, now, outbox)
	}
	if len(tw.cancels) > 0 {
		tw.queueCancels(b, now)
	}
	if len(tw.fires) > 0 {
		tw.queueFires(b, now)
	}
}

func (tw *timerWrites) queueArms(b *pgx.Batch, now any, outbox bool) {
	var rounds [][]*op
	seen := make(map[string]int, len(tw.arms))
	for _, o := range tw.arms {
		r := seen[o.arm.key]
		seen[o.arm.key] = r + 1
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], o)
	}
	tw.armedAt = make(map[string]int)
	// latest is each key's timer as an earlier round of the batch wrote it.
	if tw.latest == nil {
		tw.latest = make(map[string]hourglass.Timer)
	}
	latest := tw.latest
	for _, round := range rounds {
		n := len(round)
		keys, fireAts, delays := make([]string, n), make([]*int64, n), make([]int64, n)
		payloads, hooks, hashes := make([]*string, n), make([]*int64, n), make([][]byte, n)
		byKey := make(map[string]*op, n)
		for i, o := range round {
			a := o.arm
			keys[i], fireAts[i], delays[i], payloads[i], hooks[i], hashes[i] = a.key, a.fireAt, a.delay, a.payload, a.webhookID, a.hash
			byKey[a.key] = o
		}
		var unchanged []*op
		b.Queue(armTimersSQL, now, keys, fireAts, delays, payloads, hooks, hashes, outbox).Query(func(rows pgx.Rows) error {
			defer rows.Close()
			for rows.Next() {
				var (
					key     string
					ok      bool
					created *bool
				)
				t, found, err := scanOptTimer(rows, &created, &key, &ok)
				if err != nil {
					return err
				}
				o := byKey[key]
				switch {
				case o == nil:
					return fmt.Errorf("arm timers: key %q came back unasked", key)
				case !ok:
					o.err = plan.UnknownWebhook(*o.arm.webhookID)
				case !found:
					unchanged = append(unchanged, o)
				default:
					// xmax is not 0 on a row an earlier round inserted.
					_, earlier := latest[key]
					o.timer, o.created = t, created != nil && *created && !earlier
					latest[key] = t
					if i, ok := tw.armedAt[key]; ok {
						tw.armed[i] = o
					} else {
						tw.armedAt[key] = len(tw.armed)
						tw.armed = append(tw.armed, o)
					}
				}
			}
			return rows.Err()
		})
		b.Queue(armedReadSQL, keys).Query(func(rows pgx.Rows) error {
			read, err := timersByKey(rows)
			if err != nil {
				return err
			}
			for _, o := range unchanged {
				if t, ok := latest[o.arm.key]; ok {
					o.timer = t
				} else if t, ok := read[o.arm.key]; ok {
					o.timer = t
				} else {
					return fmt.Errorf("arm timer %q: left unchanged but not found", o.arm.key)
				}
			}
			return nil
		})
	}
}

func (tw *timerWrites) queueCancels(b *pgx.Batch, now any) {
	keys := make([]string, len(tw.cancels))
	for i, o := range tw.cancels {
		keys[i] = o.key
	}
	var locked map[string]hourglass.Timer
	b.Queue(cancelLockSQL, keys).Query(func(rows pgx.Rows) error {
		var err error
		locked, err = timersByKey(rows)
		return err
	})
	b.Queue(cancelSQL, now, keys).Query(func(rows pgx.Rows) error {
		cancelled, err := timersByKey(rows)
		if err != nil {
			return err
		}
		for _, o := range tw.cancels {
			if t, ok := cancelled[o.key]; ok {
				o.timer = t
				continue
			}
			cur, ok := locked[o.key]
			switch {
			case !ok:
				o.err = plan.TimerNotFound(o.key)
			case cur.Status == hourglass.TimerCancelled:
				o.timer = cur
			case cur.Status == hourglass.TimerFired:
				o.err = plan.TimerFired(o.key, cur.FiredAt)
			default:
				return fmt.Errorf("cancel timer %q: locked %s but not cancelled", o.key, cur.Status)
			}
		}
		return nil
	})
}

func (tw *timerWrites) queueFires(b *pgx.Batch, now any) {
	var ids []int64
	for _, o := range tw.fires {
		ids = append(ids, o.ids...)
	}
	b.Queue(fireLockSQL, ids)
	b.Queue(fireSQL, now, ids).Query(func(rows pgx.Rows) error {
		fired, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hourglass.Timer, error) { return scanTimer(row) })
		if err != nil {
			return err
		}
		tw.fired = fired
		byID := make(map[int64]hourglass.Timer, len(fired))
		for _, t := range fired {
			byID[t.ID] = t
		}
		// A timer listed by two FireTimers calls of the batch is reported
		// by the first only, as if the second had come after it.
		for _, o := range tw.fires {
			for _, id := range o.ids {
				if t, ok := byID[id]; ok {
					o.fired = append(o.fired, hourglass.FiredTimer{ID: t.ID, Key: t.Key, FireAt: t.FireAt, FiredAt: t.FiredAt})
					delete(byID, id)
				}
			}
		}
		return nil
	})
}

// timerEvents are the arguments of timerEventsSQL.
type timerEvents struct {
	ids        []string
	timers, at []int64
	bodies     []string
	hooks      []*int64
}

// events returns the timer.fired events of the timers the batch fired, or
// nil when it fired none.
func (tw *timerWrites) events() (*timerEvents, error) {
	n := len(tw.fired)
	if n == 0 {
		return nil, nil
	}
	e := &timerEvents{ids: make([]string, n), timers: make([]int64, n), at: make([]int64, n), bodies: make([]string, n), hooks: make([]*int64, n)}
	for i, t := range tw.fired {
		e.ids[i], e.timers[i], e.at[i] = hourglass.NewEventID(), t.ID, hourglass.UnixMilli(t.FiredAt)
		body := hourglass.MarshalTimerEvent(e.ids[i], t)
		if body == nil { // cannot happen: ArmTimer stores only valid JSON
			return nil, fmt.Errorf("timer %q: its payload is not valid JSON", t.Key)
		}
		e.bodies[i] = string(body)
		if t.WebhookID != 0 {
			id := t.WebhookID
			e.hooks[i] = &id
		}
	}
	return e, nil
}

// timersByKey reads rows of timerColumns into a map by key.
func timersByKey(rows pgx.Rows) (map[string]hourglass.Timer, error) {
	defer rows.Close()
	out := make(map[string]hourglass.Timer)
	for rows.Next() {
		t, err := scanTimer(rows)
		if err != nil {
			return nil, err
		}
		out[t.Key] = t
	}
	return out, rows.Err()
}
