package sqlite

import (
	"encoding/json"

	"github.com/hourglass/hourglass"
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

// columnBytes returns a copy of a column's bytes, nil when it is NULL.
func columnBytes(st *sqlite.Stmt, col int) []byte {
	if st.ColumnIsNull(col) {
		return nil
	}
	return []byte(st.ColumnText(col))
}
