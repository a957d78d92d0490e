package sqlq

import (
	"context"
	"strconv"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// Rejected timer requests (hourglass.TimerRequestStore): their listing,
// count and prune. A request's time columns are read through the dialect
// (Dialect.RequestTime), since each store keeps them in its own type and a
// shop may have written anything there.

// requestColumns are a timer_requests row as requestRow scans them.
func (s *Store) requestColumns() string {
	return `seq, timer_key, action, ` + s.d.RequestTime("fire_at") + `, delay_ms, payload, webhook_id, ` + s.d.RequestTime("requested_at")
}

// requestRow receives requestColumns.
type requestRow struct {
	seq                                       int64
	key, action, fireAt, payload, requestedAt *string
	delayMs, webhookID                        *int64
}

func (r *requestRow) dest() []any {
	return []any{&r.seq, &r.key, &r.action, &r.fireAt, &r.delayMs, &r.payload, &r.webhookID, &r.requestedAt}
}

// request returns the row as the plan reads it: Unreadable names a time
// column that holds no time (requested_at's reason before fire_at's).
func (s *Store) request(r *requestRow) plan.RequestRow {
	row := plan.RequestRow{TimerRequest: hourglass.TimerRequest{
		Seq: r.seq, Key: clone(r.key), DelayMs: clone(r.delayMs), Payload: clone(r.payload), WebhookID: clone(r.webhookID),
	}}
	if r.action != nil {
		row.Action = *r.action
	}
	if r.fireAt != nil {
		row.FireAt, row.Unreadable = s.d.ParseRequestTime("fire_at", *r.fireAt)
	}
	if r.requestedAt != nil {
		t, bad := s.d.ParseRequestTime("requested_at", *r.requestedAt)
		if t != nil {
			row.RequestedAt = *t
		}
		if bad != "" {
			row.Unreadable = bad
		}
	}
	return row
}

// clone copies what p points to, so that a row scanned next cannot change it.
func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// UnixMicros is Dialect.ParseRequestTime for a RequestTime that reads
// microseconds since the Unix epoch, or "" for a zero date (MySQL's
// DATETIME may hold one).
func UnixMicros(col, text string) (*time.Time, string) {
	us, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return &time.Time{}, col + ": not a valid time (a zero date)"
	}
	t := time.UnixMicro(us).UTC()
	return &t, ""
}

// RejectedTimerRequests implements hourglass.TimerRequestStore: a range of
// timer_request_errors' primary key. Errors: invalid_argument (a limit
// under 1), unavailable.
func (s *Store) RejectedTimerRequests(ctx context.Context, after int64, limit int) ([]hourglass.RejectedTimerRequest, error) {
	if limit < 1 {
		return nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", limit)
	}
	var (
		out        []hourglass.RejectedTimerRequest
		r          requestRow
		rejectedAt *string
		reason     string
	)
	err := s.read(ctx, "rejected timer requests", func(x q) error {
		out = nil
		return x.each(ctx, `SELECT `+s.requestColumns()+`, `+s.d.RequestTime("rejected_at")+`, reason
FROM timer_request_errors WHERE seq > ? ORDER BY seq LIMIT ?`, []any{after, limit}, append(r.dest(), &rejectedAt, &reason), func() error {
			rej := hourglass.RejectedTimerRequest{TimerRequest: s.request(&r).TimerRequest, Reason: reason}
			if rejectedAt != nil {
				if t, _ := s.d.ParseRequestTime("rejected_at", *rejectedAt); t != nil {
					rej.RejectedAt = *t
				}
			}
			out = append(out, rej)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RejectedTimerRequestCount implements hourglass.TimerRequestStore.
// Errors: unavailable.
func (s *Store) RejectedTimerRequestCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.read(ctx, "count rejected timer requests", func(x q) error {
		_, err := x.row(ctx, `SELECT count(*) FROM timer_request_errors`, nil, &n)
		return err
	})
	return n, err
}

// PruneRejectedTimerRequests implements hourglass.TimerRequestStore: one
// DELETE of the oldest by seq, in its own transaction. before is bound as
// a time in UTC (SQLite's adapter binds it as the unix ms its rejected_at
// holds). Errors: unavailable.
func (s *Store) PruneRejectedTimerRequests(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	query := s.deleteSome("timer_request_errors", "seq", "", `rejected_at < ?`, "seq")
	err := s.write(ctx, "prune rejected timer requests", Normal, func(x q) error {
		var err error
		n, err = x.exec(ctx, query, before.UTC(), limit)
		return err
	})
	return int(n), err
}
