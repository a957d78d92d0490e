package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// Timer requests (hourglass.TimerRequestStore) on SQLite: rows another
// process writing this database file INSERTs into timer_requests
// (migration 0007) in its own transaction, applied on the single writer in
// one transaction: each request in seq order with ArmTimer's and
// CancelTimer's algorithm (store/internal/batch), those that cannot be applied
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
	case col == "fire_at" || col == "requested_at":
		return nil, fmt.Sprintf("%s: %q is not a time (want 2026-11-25 10:00:00.000 in UTC, or RFC 3339)", col, text)
	}
	return nil, ""
}

// TimerRequestsWritten implements hourglass.TimerRequestStore: nil, the
// applier polls (another process's commit cannot wake this one).
func (s *Store) TimerRequestsWritten() <-chan struct{} { return nil }

// ApplyTimerRequests implements hourglass.TimerRequestStore. Errors:
// unavailable.
func (s *Store) ApplyTimerRequests(ctx context.Context, p hourglass.TimerRequestsParams) (hourglass.TimerRequestsApplied, error) {
	var res hourglass.TimerRequestsApplied
	if p.Limit < 1 {
		return res, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", p.Limit)
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
		res, err = s.applyRequestsIn(ctx, conn, now, p) // set afresh: the op may run again alone
		return err
	})
	if err != nil {
		return hourglass.TimerRequestsApplied{}, err
	}
	return res, nil
}

// applyRequestsIn applies up to p.Limit requests in the writer's
// transaction at now (sqlq.Store.ApplyTimerRequestsIn): one writer, so no
// key is held back, and the requests run in seq order as one batch of ArmTimer's
// and CancelTimer's writes.
func (s *Store) applyRequestsIn(ctx context.Context, conn *sqlite.Conn, now time.Time, p hourglass.TimerRequestsParams) (hourglass.TimerRequestsApplied, error) {
	b, err := s.Store.ApplyTimerRequestsIn(ctx, connQuerier{conn}, p, func(sqlq.Querier) (time.Time, error) { return now, nil },
		func(ctx context.Context, _ sqlq.Querier, _ time.Time, p plan.TimerRequests) (func(), error) {
			_, err := batch.RunRequests(ctx, s.batchConfig(), &txn{s: s, conn: conn}, p)
			return nil, err
		})
	if err != nil {
		return hourglass.TimerRequestsApplied{}, wrap("apply timer requests", err)
	}
	res := b.Plan.Result(now)
	res.Full = b.Full
	return res, nil
}

var _ hourglass.TimerRequestStore = (*Store)(nil)
