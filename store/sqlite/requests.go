package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// Timer requests (hourglass.TimerRequestStore) on SQLite: rows another
// process writing this database file INSERTs into timer_requests
// (migration 0007) in its own transaction, applied on the single writer in
// one transaction: each request in seq order with ArmTimer's and
// CancelTimer's statements (armIn, cancelIn), those that cannot be applied
// moved to timer_request_errors with their reason, all of them deleted.
// One writer applies them, so no request is taken twice; what the
// transaction armed and cancelled is announced on the due feed after it
// committed.

// requestTimeLayouts are the forms of fire_at and requested_at read: the
// default of requested_at (strftime's, UTC), Go's time.Time.String (as
// modernc's driver writes one), the same with an offset, and RFC 3339.
var requestTimeLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999 -0700 MST", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999"}

// parseRequestTime reads a TEXT time of timer_requests, in UTC unless it
// names its offset.
func parseRequestTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	for _, layout := range requestTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// parseRequestColumn is Dialect.ParseRequestTime: fire_at and requested_at
// as parseRequestTime reads them, rejected_at (which hourglass writes) as
// unix ms. A requested_at that is not a time reads as none (the zero time)
// and rejects nothing: only a bad fire_at ever rejected a request here,
// whereas MySQL rejects a zero requested_at.
func parseRequestColumn(col, text string) (*time.Time, string) {
	if col == "rejected_at" {
		ms, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, ""
		}
		t := hourglass.FromUnixMilli(ms)
		return &t, ""
	}
	t, ok := parseRequestTime(text)
	switch {
	case ok:
		return &t, ""
	case col == "fire_at":
		return nil, fmt.Sprintf("fire_at: %q is not a time (want 2026-11-25 10:00:00.000 in UTC, or RFC 3339)", text)
	}
	return nil, ""
}

// scanRequest reads the columns seq, timer_key, action, fire_at,
// delay_ms, payload, webhook_id and requested_at (0 to 7) of a request row.
// badFireAt is fire_at's text when it does not hold a time (FireAt is then
// nil); RequestedAt is zero when it does not.
func scanRequest(stmt *sqlite.Stmt) (r hourglass.TimerRequest, badFireAt string) {
	r.Seq = stmt.ColumnInt64(0)
	if !stmt.ColumnIsNull(1) {
		k := stmt.ColumnText(1)
		r.Key = &k
	}
	r.Action = stmt.ColumnText(2)
	if !stmt.ColumnIsNull(3) {
		if t, ok := parseRequestTime(stmt.ColumnText(3)); ok {
			r.FireAt = &t
		} else {
			badFireAt = stmt.ColumnText(3)
		}
	}
	if !stmt.ColumnIsNull(4) {
		d := stmt.ColumnInt64(4)
		r.DelayMs = &d
	}
	if !stmt.ColumnIsNull(5) {
		p := stmt.ColumnText(5)
		r.Payload = &p
	}
	if !stmt.ColumnIsNull(6) {
		w := stmt.ColumnInt64(6)
		r.WebhookID = &w
	}
	r.RequestedAt, _ = parseRequestTime(stmt.ColumnText(7))
	return r, badFireAt
}

// TimerRequestsWritten implements hourglass.TimerRequestStore: nil, the
// applier polls (another process's commit cannot wake this one).
func (s *Store) TimerRequestsWritten() <-chan struct{} { return nil }

// ApplyTimerRequests implements hourglass.TimerRequestStore. Errors:
// unavailable.
func (s *Store) ApplyTimerRequests(ctx context.Context, limit int) (hourglass.TimerRequestsApplied, error) {
	var res hourglass.TimerRequestsApplied
	if limit < 1 {
		return res, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", limit)
	}
	// Most polls find nothing: a read, not a write transaction.
	var any bool
	if err := s.read(ctx, func(conn *sqlite.Conn) error {
		var err error
		any, err = step(conn.Prep(`SELECT 1 FROM timer_requests LIMIT 1`), nil)
		return err
	}); err != nil {
		return res, fmt.Errorf("sqlite: look for timer requests: %w", err)
	}
	if !any {
		return res, nil
	}
	due := func(u *hourglass.DueUpdate) {
		u.Due = append(u.Due, res.Armed...)
		u.Gone = append(u.Gone, res.Cancelled...)
	}
	err := s.writeDue(ctx, due, func(conn *sqlite.Conn, now time.Time) error {
		var err error
		res, err = s.applyRequestsIn(conn, now, limit) // set afresh: the op may run again alone
		return err
	})
	if err != nil {
		return hourglass.TimerRequestsApplied{}, err
	}
	return res, nil
}

// applyRequestsIn applies up to limit requests in the writer's
// transaction at now: one writer, so no key is held back and each request
// runs in seq order with ArmTimer's and CancelTimer's statements.
func (s *Store) applyRequestsIn(conn *sqlite.Conn, now time.Time, limit int) (hourglass.TimerRequestsApplied, error) {
	stmt := conn.Prep(`SELECT seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at FROM timer_requests ORDER BY seq LIMIT ?1`)
	stmt.BindInt64(1, int64(limit))
	var reqs []plan.RequestRow
	for {
		row, err := stmt.Step()
		if err != nil {
			stmt.Reset()
			return hourglass.TimerRequestsApplied{}, fmt.Errorf("sqlite: read timer requests: %w", err)
		}
		if !row {
			break
		}
		r, fireAt := scanRequest(stmt)
		req := plan.RequestRow{TimerRequest: r}
		if fireAt != "" {
			req.Unreadable = fmt.Sprintf("fire_at: %q is not a time (want 2026-11-25 10:00:00.000 in UTC, or RFC 3339)", fireAt)
		}
		reqs = append(reqs, req)
	}
	stmt.Reset()
	p := plan.PlanTimerRequests(reqs, nil, now)
	for _, r := range p {
		var (
			t   hourglass.Timer
			err error
		)
		switch {
		case !r.Runs():
			continue
		case r.Arm != nil:
			t, _, err = s.armIn(conn, now, *r.Arm)
		default:
			t, err = cancelIn(conn, now, r.CancelKey)
		}
		if err := r.Settle(t, err); err != nil {
			return hourglass.TimerRequestsApplied{}, err // the database's: the transaction rolls back
		}
	}
	done, rejected := p.Outcome()
	reject := conn.Prep(`INSERT OR FAIL INTO timer_request_errors (seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at, rejected_at, reason)
SELECT seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at, ?2, ?3 FROM timer_requests WHERE seq = ?1
ON CONFLICT (seq) DO NOTHING`)
	for _, r := range rejected {
		reject.BindInt64(1, r.Row.Seq)
		reject.BindInt64(2, hourglass.UnixMilli(now))
		reject.BindText(3, r.Reason)
		if _, err := step(reject, nil); err != nil {
			return hourglass.TimerRequestsApplied{}, fmt.Errorf("sqlite: reject timer request %d: %w", r.Row.Seq, err)
		}
	}
	if len(done) > 0 {
		del := conn.Prep(`DELETE FROM timer_requests WHERE seq <= ?1`)
		del.BindInt64(1, done[len(done)-1])
		if _, err := step(del, nil); err != nil {
			return hourglass.TimerRequestsApplied{}, fmt.Errorf("sqlite: delete timer requests: %w", err)
		}
	}
	res := p.Result(now)
	res.Full = len(reqs) == limit
	return res, nil
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
