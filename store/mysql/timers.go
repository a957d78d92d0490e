package mysql

import (
	"context"
	"database/sql"
	"slices"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
)

// Named timers (hourglass.TimerStore) in the timers table (migration 0005).
//
// Timer ids start at hourglass.TimerIDBase, so an armed timer goes through
// the machinery of an order's deadline unchanged: its id and fire time are
// written to timer_outbox (Config.Outbox) and to order_feed (other
// processes' WatchCreated), TimersDue pages it like PendingDue, and its
// timer.fired event and webhook deliveries carry its id in order_id. The
// one difference in those tables: a timer.fired event keeps its body
// (events.body), since there is no order row to render it from.
//
// Timer writes (ArmTimer, CancelTimer, FireTimers) are group-committed
// with the order writes (store/internal/batch): one transaction, one
// commit, for a batch of them, run again after a deadlock, a lock wait
// timeout, a racing duplicate key or, on Galera, a lost certification.
// Each batch locks the timer rows it decides on (by key, then by id, each
// in ascending order) before it reads now, so the decision and the write
// are one step under the lock, whichever process or Galera node races it.

var _ hourglass.TimerStore = (*Store)(nil)

const timerColumns = `id, timer_key, status, fire_at, fired_at, payload, webhook_id, created_at, updated_at`

// scanTimer reads timerColumns, followed by extra destinations.
func scanTimer(sc scanner, extra ...any) (hourglass.Timer, error) {
	var (
		t                  hourglass.Timer
		key                []byte
		status             string
		fireAt             int64
		firedAt, webhookID sql.NullInt64
		payload            []byte
		created, updated   int64
	)
	dest := append([]any{&t.ID, &key, &status, &fireAt, &firedAt, &payload, &webhookID, &created, &updated}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return t, err
	}
	t.Key, t.Status = string(key), hourglass.TimerStatus(status)
	t.FireAt = hourglass.FromUnixMilli(fireAt)
	if firedAt.Valid {
		t.FiredAt = hourglass.FromUnixMilli(firedAt.Int64)
	}
	if payload != nil {
		t.Payload = payload
	}
	t.WebhookID = webhookID.Int64
	t.CreatedAt, t.UpdatedAt = hourglass.FromUnixMilli(created), hourglass.FromUnixMilli(updated)
	return t, nil
}

// ArmTimer implements hourglass.TimerStore. It is group-committed with the
// order writes (store/internal/batch): the key's row is locked in the batch's
// transaction, then inserted or re-armed. Two arms of a new key racing from
// several store values, processes or Galera nodes both find no row; the
// second insert fails with a duplicate key (or a lost certification) and
// its batch runs again, finding the first one's row: exactly one of them is
// created. An arming that changes the timer also writes its outbox timer
// (Config.Outbox) and its order_feed entry (cluster.go, with
// Config.AnnounceWithin's rule) in the same transaction. Errors:
// invalid_argument (p.Validate, a WebhookID naming no webhook, a
// RequestHash over 255 bytes), unavailable.
func (s *Store) ArmTimer(ctx context.Context, p hourglass.ArmTimerParams) (hourglass.Timer, bool, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Timer{}, false, err
	}
	if len(p.RequestHash) > 255 {
		return hourglass.Timer{}, false, hourglass.Errorf(hourglass.CodeInvalidArgument, "request hash: at most 255 bytes, got %d", len(p.RequestHash))
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Arm, Arm: p})
	if r.Err != nil {
		return hourglass.Timer{}, false, r.Err
	}
	return r.Timer, r.Created, nil
}

// CancelTimer implements hourglass.TimerStore. It is group-committed
// (store/internal/batch): the row is locked, then a scheduled timer is moved to
// cancelled. Errors: not_found, timer_fired, unavailable.
func (s *Store) CancelTimer(ctx context.Context, key string) (hourglass.Timer, error) {
	r := s.submit(ctx, &batch.Op{Kind: batch.Cancel, Key: key})
	if r.Err != nil {
		return hourglass.Timer{}, r.Err
	}
	return r.Timer, nil
}

// FireTimers implements hourglass.TimerStore. It is group-committed and,
// like CloseOrders, jumps the queue of API writes (store/internal/batch): the
// listed scheduled timers are locked by id, now is read, and for those due
// the batch writes status fired, one timer.fired event each with its body,
// and the deliveries: to the timer's webhook if it still exists (its row
// read with a shared lock, so a concurrent DeleteWebhook waits for this
// commit and then deletes them), else to the webhooks subscribed to
// timer.fired or "*". Ids that are not timers' are ignored. Errors:
// unavailable.
func (s *Store) FireTimers(ctx context.Context, ids []int64) ([]hourglass.FiredTimer, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return !hourglass.IsTimerID(id) })
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	r := s.submit(ctx, &batch.Op{Kind: batch.Fire, IDs: slices.Compact(ids)})
	return r.Fired, r.Err
}

// nullBytes is NULL for nil, else b.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// nullID is NULL for 0, else id.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}
