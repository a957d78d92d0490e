package sqlite

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
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

// ArmTimer implements hourglass.TimerStore, group-committed on the one
// writer (store/internal/batch): re-armed unless it is scheduled with the
// same request hash (a repeat writes nothing: idempotent), inserted if it is
// new; an arming that changed the timer writes its id and fire time to the
// outbox when Config.Outbox is on. Errors: invalid_argument (p.Validate, an
// unknown WebhookID), unavailable.
func (s *Store) ArmTimer(ctx context.Context, p hourglass.ArmTimerParams) (hourglass.Timer, bool, error) {
	if err := p.Validate(); err != nil {
		return hourglass.Timer{}, false, err
	}
	r := s.submit(ctx, &batch.Op{Kind: batch.Arm, Arm: p})
	if r.Err != nil {
		return hourglass.Timer{}, false, r.Err
	}
	return r.Timer, r.Created, nil
}

// CancelTimer implements hourglass.TimerStore: a scheduled timer becomes
// cancelled; a cancelled timer is returned as it is (idempotent). Errors:
// not_found, timer_fired.
func (s *Store) CancelTimer(ctx context.Context, key string) (hourglass.Timer, error) {
	r := s.submit(ctx, &batch.Op{Kind: batch.Cancel, Key: key})
	if r.Err != nil {
		return hourglass.Timer{}, r.Err
	}
	return r.Timer, nil
}

// FireTimers implements hourglass.TimerStore. Like CloseOrders it jumps the
// queue of API writes (a burst of arms cannot make a fire late): the listed
// timers still scheduled and due are fired, each with its timer.fired event
// (with its body) and its deliveries: to its own webhook if it names one,
// else to the webhooks subscribed. Ids of orders, unknown ids and timers not
// scheduled and due are skipped.
func (s *Store) FireTimers(ctx context.Context, ids []int64) ([]hourglass.FiredTimer, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return !hourglass.IsTimerID(id) })
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	r := s.submit(ctx, &batch.Op{Kind: batch.Fire, IDs: slices.Compact(ids)})
	return r.Fired, r.Err
}

// columnBytes returns a copy of a column's bytes, nil when it is NULL.
func columnBytes(st *sqlite.Stmt, col int) []byte {
	if st.ColumnIsNull(col) {
		return nil
	}
	return []byte(st.ColumnText(col))
}
