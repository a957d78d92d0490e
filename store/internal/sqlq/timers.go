package sqlq

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// timerColumns are a timer's columns (key: its column's name), in the
// order timerRow scans them.
func (s *Store) timerColumns() string {
	return `id, ` + s.d.TimerKey + `, status, fire_at, fired_at, payload, webhook_id, created_at, updated_at`
}

// keyArg is a timer's key as its column compares it.
func (s *Store) keyArg(key string) any {
	if s.d.KeyArg != nil {
		return s.d.KeyArg(key)
	}
	return key
}

// timerRow receives timerColumns.
type timerRow struct {
	id, fireAt, created, updated int64
	key, status                  string
	firedAt, webhookID           *int64
	payload                      []byte
}

func (r *timerRow) dest() []any {
	r.payload = nil
	return []any{&r.id, &r.key, &r.status, &r.fireAt, &r.firedAt, &r.payload, &r.webhookID, &r.created, &r.updated}
}

func (r *timerRow) timer() hourglass.Timer {
	t := hourglass.Timer{
		ID:        r.id,
		Key:       r.key,
		Status:    hourglass.TimerStatus(r.status),
		FireAt:    hourglass.FromUnixMilli(r.fireAt),
		CreatedAt: hourglass.FromUnixMilli(r.created),
		UpdatedAt: hourglass.FromUnixMilli(r.updated),
	}
	if r.firedAt != nil {
		t.FiredAt = hourglass.FromUnixMilli(*r.firedAt)
	}
	if r.payload != nil {
		t.Payload = json.RawMessage(r.payload)
	}
	if r.webhookID != nil {
		t.WebhookID = *r.webhookID
	}
	return t
}

// Timer implements hourglass.TimerStore. Errors: not_found, unavailable.
func (s *Store) Timer(ctx context.Context, key string) (hourglass.Timer, error) {
	var (
		r     timerRow
		found bool
	)
	err := s.read(ctx, "get timer", func(x q) (err error) {
		found, err = x.row(ctx, `SELECT `+s.timerColumns()+` FROM timers WHERE `+s.d.TimerKey+` = ?`, []any{s.keyArg(key)}, r.dest()...)
		return err
	})
	if err != nil {
		return hourglass.Timer{}, err
	}
	if !found {
		return hourglass.Timer{}, plan.TimerNotFound(key)
	}
	return r.timer(), nil
}

// Timers implements hourglass.TimerStore: one range of the key's unique
// index, in the keys' bytewise order, or of timers_status_key when
// f.Status is set (a prefix narrows the range); ordered by fire time, a
// range of timers_status_fire_at for the status, or for each status
// merged, or with a prefix and an open fire range the prefix's range of
// timers_status_key sorted by fire time. Errors: invalid_argument (a status that is not one, a limit
// under 1), unavailable.
func (s *Store) Timers(ctx context.Context, f hourglass.TimerFilter) ([]hourglass.Timer, error) {
	query, args, err := s.TimersSQL(f)
	if err != nil {
		return nil, err
	}
	var (
		out []hourglass.Timer
		r   timerRow
	)
	err = s.read(ctx, "list timers", func(x q) error {
		out = out[:0]
		return x.each(ctx, query, args, r.dest(), func() error {
			out = append(out, r.timer())
			r.payload = nil
			return nil
		})
	})
	return out, err
}

// TimersSQL is Timers' statement and arguments (exported for the stores'
// plan tests), or Timers' invalid_argument error.
func (s *Store) TimersSQL(f hourglass.TimerFilter) (string, []any, error) {
	if f.Status != "" && !f.Status.Valid() {
		return "", nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "status: must be scheduled, fired or cancelled, got %q", f.Status)
	}
	if f.Limit < 1 {
		return "", nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", f.Limit)
	}
	k := s.d.TimerKey
	var (
		conds []string
		args  []any
	)
	if f.Prefix != "" {
		// A key is of bytes below 0x7f (ValidateTimerKey): the keys that
		// start with the prefix are [prefix, prefix + 0x7f).
		conds = append(conds, k+` >= ?`, k+` < ?`)
		args = append(args, s.keyArg(f.Prefix), s.keyArg(f.Prefix+"\x7f"))
	}
	if !f.ByFireAt() {
		conds = append(conds, k+` > ?`)
		args = append(args, s.keyArg(f.After))
		from := `timers`
		if f.Status != "" {
			from = s.d.From("timers", "timers_status_key")
			conds = append([]string{`status = ?`}, conds...)
			args = append([]any{string(f.Status)}, args...)
		}
		return `SELECT ` + s.timerColumns() + ` FROM ` + from + ` WHERE ` + strings.Join(conds, ` AND `) + ` ORDER BY ` + k + ` LIMIT ?`,
			append(args, f.Limit), nil
	}
	for _, b := range []struct {
		op string
		t  time.Time
	}{{">=", fromCursor(f.FireFrom, f.AfterID != 0, f.AfterFireAt)}, {"<", f.FireBefore}} {
		if !b.t.IsZero() {
			conds = append(conds, `fire_at `+b.op+` ?`)
			args = append(args, ceilMilli(b.t))
		}
	}
	if f.AfterID != 0 {
		cond, a := s.keysetAfter("fire_at", "id", hourglass.UnixMilli(f.AfterFireAt), f.AfterID)
		conds = append(conds, cond)
		args = append(args, a...)
	}
	// A prefix and an open fire range: the prefix's keys are read, sorted
	// by fire time, rather than the fire range to its end for a prefix
	// whose timers may all have been listed.
	index := "timers_status_fire_at"
	if f.Prefix != "" && (f.FireFrom.IsZero() || f.FireBefore.IsZero()) {
		index = "timers_status_key"
	}
	statuses := []hourglass.TimerStatus{f.Status}
	if f.Status == "" {
		statuses = []hourglass.TimerStatus{hourglass.TimerScheduled, hourglass.TimerFired, hourglass.TimerCancelled}
	}
	var (
		parts   []string
		allArgs []any
	)
	for i, st := range statuses {
		arm := `SELECT ` + s.timerColumns() + ` FROM ` + s.d.From("timers", index) + ` WHERE status = ? AND ` +
			strings.Join(conds, ` AND `) + ` ORDER BY fire_at, id LIMIT ?`
		if len(statuses) == 1 {
			return arm, append(append([]any{string(st)}, args...), f.Limit), nil
		}
		parts = append(parts, `SELECT * FROM (`+arm+`) a`+strconv.Itoa(i))
		allArgs = append(append(append(allArgs, string(st)), args...), f.Limit)
	}
	return `SELECT * FROM (` + strings.Join(parts, "\nUNION ALL ") + `) t ORDER BY fire_at, id LIMIT ?`, append(allArgs, f.Limit), nil
}

// TimersDue implements hourglass.TimerStore: one range of the (status,
// fire_at, id) index, as PendingDue reads the orders'.
func (s *Store) TimersDue(ctx context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	return s.due(ctx, "timers due", "timers", "timers_status_fire_at", "scheduled", "fire_at", p)
}

// TimerCounts implements hourglass.TimerStore: one statement (one
// snapshot) counting each status's range of the (status, fire_at, id)
// index.
func (s *Store) TimerCounts(ctx context.Context) (map[hourglass.TimerStatus]int64, error) {
	from := s.d.From("timers", "timers_status_fire_at")
	var scheduled, fired, cancelled int64
	err := s.read(ctx, "count timers", func(x q) error {
		_, err := x.row(ctx, `SELECT (SELECT count(*) FROM `+from+` WHERE status = 'scheduled'),
	(SELECT count(*) FROM `+from+` WHERE status = 'fired'),
	(SELECT count(*) FROM `+from+` WHERE status = 'cancelled')`, nil, &scheduled, &fired, &cancelled)
		return err
	})
	if err != nil {
		return nil, err
	}
	return map[hourglass.TimerStatus]int64{
		hourglass.TimerScheduled: scheduled,
		hourglass.TimerFired:     fired,
		hourglass.TimerCancelled: cancelled,
	}, nil
}
