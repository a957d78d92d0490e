package sqlq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// Rejected timer requests (hourglass.TimerRequestStore): their listing,
// count and prune. A request's time columns are read through the dialect
// (Dialect.RequestTime), since each store keeps them in its own type and a
// shop may have written anything there.

// Bounds of the text columns a shop writes, checked by the database
// before a row is read: a longer value is not selected (NULL), only its
// size (octet_length, which PostgreSQL reads from a TOASTed value's
// header), and the request is rejected by that size. A shop may write
// megabytes in any of them; the process never holds more than these.
const (
	// maxRequestText bounds timer_key and action: a valid key has at most
	// hourglass.MaxTimerKey bytes, a valid action 6.
	maxRequestText = 1 << 10
	// maxRequestPayload is a valid payload's bound.
	maxRequestPayload = hourglass.MaxTimerPayload
)

// bounded is the columns that read the text column col when its size is at
// most limit (else NULL), and its size; for a listing (list), the first
// hourglass.RejectedTextMax characters and the size.
func bounded(col string, limit int, list bool) string {
	if list {
		return `substr(` + col + `, 1, ` + strconv.Itoa(hourglass.RejectedTextMax) + `), octet_length(` + col + `)`
	}
	return `CASE WHEN octet_length(` + col + `) <= ` + strconv.Itoa(limit) + ` THEN ` + col + ` END, octet_length(` + col + `)`
}

// requestColumns are a timer_requests (or timer_request_errors, list) row
// as requestRow scans them.
func (s *Store) requestColumns(list bool) string {
	return `seq, ` + bounded("timer_key", maxRequestText, list) + `, ` + bounded("action", maxRequestText, list) + `, ` +
		s.d.RequestTime("fire_at") + `, delay_ms, ` + bounded("payload", maxRequestPayload, list) + `, webhook_id, ` + s.d.RequestTime("requested_at")
}

// requestRow receives requestColumns.
type requestRow struct {
	seq                                       int64
	key, action, fireAt, payload, requestedAt *string
	keyBytes, actionBytes, payloadBytes       *int64
	delayMs, webhookID                        *int64
}

func (r *requestRow) dest() []any {
	return []any{&r.seq, &r.key, &r.keyBytes, &r.action, &r.actionBytes, &r.fireAt, &r.delayMs, &r.payload, &r.payloadBytes, &r.webhookID, &r.requestedAt}
}

// request returns the row as the plan reads it: Unreadable names a time
// column that holds no time (requested_at's reason before fire_at's), or a
// text column over its bound, by its size.
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
	switch {
	case r.payload == nil && r.payloadBytes != nil:
		row.Unreadable = fmt.Sprintf("payload: at most %d bytes, got %d", maxRequestPayload, *r.payloadBytes)
	case r.key == nil && r.keyBytes != nil:
		row.Unreadable = fmt.Sprintf("timer_key: must be 1 to %d characters, got %d bytes", hourglass.MaxTimerKey, *r.keyBytes)
	case r.action == nil && r.actionBytes != nil:
		row.Unreadable = fmt.Sprintf("action: must be %q or %q, got %d bytes", hourglass.TimerRequestArm, hourglass.TimerRequestCancel, *r.actionBytes)
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
// microseconds since the Unix epoch: "" for a zero date (MySQL's DATETIME
// may hold one), "infinity" or "-infinity" (PostgreSQL's), or a number too
// large for a time are rejected, the reason naming which.
func UnixMicros(col, text string) (*time.Time, string) {
	us, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		what := "out of range"
		switch text {
		case "":
			what = "a zero date"
		case "infinity", "-infinity":
			what = text
		}
		return &time.Time{}, col + ": not a valid time (" + what + ")"
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
		return x.each(ctx, `SELECT `+s.requestColumns(true)+`, `+s.d.RequestTime("rejected_at")+`, reason
FROM timer_request_errors WHERE seq > ? ORDER BY seq LIMIT ?`, []any{after, limit}, append(r.dest(), &rejectedAt, &reason), func() error {
			rej := hourglass.RejectedTimerRequest{TimerRequest: s.request(&r).TimerRequest, Reason: reason}
			rej.Key, rej.Payload = firstBytes(rej.Key), firstBytes(rej.Payload)
			rej.Action = *firstBytes(&rej.Action)
			if r.payloadBytes != nil {
				rej.PayloadBytes = *r.payloadBytes
			}
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

// firstBytes returns *p cut to its first hourglass.RejectedTextMax bytes,
// at a character's start (substr took that many characters, each up to 4
// bytes).
func firstBytes(p *string) *string {
	if p == nil || len(*p) <= hourglass.RejectedTextMax {
		return p
	}
	n := hourglass.RejectedTextMax
	for n > 0 && !utf8.RuneStart((*p)[n]) {
		n--
	}
	v := (*p)[:n]
	return &v
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

// TimerRequestWrites writes the requests of p that run
// (plan.TimerRequest.Runs) in the transaction x they were read in, as
// ArmTimer and CancelTimer would at now, and settles each with what its
// write answered (plan.TimerRequest.Settle): a store's group-commit
// statements, which stay in the store. after, when not nil, runs once the
// transaction committed. Its errors are the database's: the transaction
// rolls back.
type TimerRequestWrites func(ctx context.Context, x Querier, now time.Time, p plan.TimerRequests) (after func(), err error)

// TimerRequests is one transaction's batch of timer requests, decided and
// written (ApplyTimerRequestsIn).
type TimerRequests struct {
	Plan plan.TimerRequests
	// At is the time they were decided at.
	At time.Time
	// Full says the batch took as many requests as it could: more may be
	// waiting.
	Full bool
	// After is what the writes asked to run once the transaction committed
	// (nil: nothing).
	After func()
}

// ApplyTimerRequests applies up to p.Limit timer requests in one
// transaction (DB.Write, run again as the store's retry policy allows) by
// ApplyTimerRequestsIn, deciding them at the database's now (dbNow:
// Dialect.Now read in the transaction, as the store's group commit decides)
// or else at clock's. The lags of its result count to that now plus the time
// clock says the transaction took since; the store announces the result's
// Armed and Cancelled to its due feed. Errors: invalid_argument (a limit
// under 1), unavailable (the outcome of the commit may then be unknown:
// the requests it applied are gone, the others are still there for the
// next call).
func (s *Store) ApplyTimerRequests(ctx context.Context, p hourglass.TimerRequestsParams, clock hourglass.Clock, dbNow bool, write TimerRequestWrites) (hourglass.TimerRequestsApplied, error) {
	if p.Limit < 1 {
		return hourglass.TimerRequestsApplied{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be positive, got %d", p.Limit)
	}
	var (
		b       TimerRequests
		started time.Time
	)
	err := s.db.Write(ctx, "apply timer requests", Normal, func(x Querier) (err error) {
		b, err = s.ApplyTimerRequestsIn(ctx, x, p, func(x Querier) (time.Time, error) {
			started = clock.Now()
			if !dbNow {
				return started, nil
			}
			ms, err := s.now(ctx, s.wrap(x))
			return hourglass.FromUnixMilli(ms), err
		}, write)
		return err
	})
	if err != nil {
		return hourglass.TimerRequestsApplied{}, err
	}
	if b.After != nil {
		b.After()
	}
	res := b.Plan.Result(b.At.Add(max(clock.Now().Sub(started), 0)))
	res.Full = b.Full
	return res, nil
}

// ApplyTimerRequestsIn applies up to p.Limit timer requests in the
// transaction x, for a store whose transaction is its own (SQLite's
// writer) or ApplyTimerRequests:
//
//  1. it takes the oldest requests no other transaction holds
//     (FOR UPDATE SKIP LOCKED: appliers on several nodes take disjoint
//     batches, and none waits on another; a shop's uncommitted request is
//     locked by its INSERT, so it is skipped too);
//  2. holds back a key with an earlier request the batch does not hold
//     (another applier holds it, or it committed since), so that each
//     key's requests take effect in seq order;
//  3. reads what PUT /v1/timers/{key} checks against the database (the
//     webhooks the arms name, and the arms' keys that name a timer when the
//     batch could create more than p.Room), decides each at now(x)
//     (plan.PlanTimerRequests: the API's checks and request hash, a delay
//     counted from requested_at or now if earlier, a time column that holds
//     no time or a text column over its bound rejected) and writes those
//     that run (write);
//  4. moves those that cannot be applied to timer_request_errors with
//     their reason, as the shop wrote them (a seq listed there already,
//     timer_requests' counter set back, keeps its first rejection);
//  5. deletes them all.
//
// A request is thus applied exactly once, whichever process dies when.
// Its errors are the database's (the caller rolls back).
func (s *Store) ApplyTimerRequestsIn(ctx context.Context, tx Querier, params hourglass.TimerRequestsParams, now func(x Querier) (time.Time, error), write TimerRequestWrites) (TimerRequests, error) {
	limit := params.Limit
	x := s.wrap(tx)
	var (
		reqs []plan.RequestRow
		r    requestRow
	)
	// 1. The oldest requests no one holds.
	lock := ` FOR UPDATE SKIP LOCKED`
	if s.d.OneWriter {
		lock = ""
	}
	err := x.each(ctx, `SELECT `+s.requestColumns(false)+` FROM timer_requests ORDER BY seq LIMIT ?`+lock, []any{limit}, r.dest(), func() error {
		reqs = append(reqs, s.request(&r))
		return nil
	})
	if err != nil || len(reqs) == 0 {
		return TimerRequests{}, err
	}
	// 2. The keys to hold back.
	held, err := s.heldKeys(ctx, x, reqs)
	if err != nil {
		return TimerRequests{}, err
	}
	// 3. What PUT checks in the database; then decided, and written.
	facts, err := s.requestFacts(ctx, x, reqs, params)
	if err != nil {
		return TimerRequests{}, err
	}
	at, err := now(tx)
	if err != nil {
		return TimerRequests{}, err
	}
	p := plan.PlanTimerRequests(reqs, held, at, facts)
	after, err := write(ctx, tx, at, p)
	if err != nil {
		return TimerRequests{}, err
	}
	// 4. The rejected ones, with their reasons.
	done, rejected := p.Outcome()
	if len(rejected) > 0 {
		reasons := make([]any, 0, 2*len(rejected))
		seqs := make([]int64, len(rejected))
		for i, r := range rejected {
			reasons = append(reasons, r.Row.Seq, r.Reason)
			seqs[i] = r.Row.Seq
		}
		in, inArgs := in(s.d, "r.seq", seqs)
		if _, err := x.exec(ctx, `INSERT INTO timer_request_errors (seq, timer_key, action, fire_at, delay_ms, payload, webhook_id, requested_at, rejected_at, reason)
SELECT r.seq, r.timer_key, r.action, r.fire_at, r.delay_ms, r.payload, r.webhook_id, r.requested_at, ?, CASE r.seq`+strings.Repeat(` WHEN ? THEN ?`, len(rejected))+` END
FROM timer_requests r WHERE `+in+s.d.KeepFirst("timer_request_errors", "seq"), append(append([]any{at}, reasons...), inArgs...)...); err != nil {
			return TimerRequests{}, err
		}
	}
	// 5. All of them gone.
	if len(done) > 0 {
		del, args := in(s.d, "seq", done)
		if s.d.OneWriter {
			// No other transaction holds a request: the batch is every
			// request up to its last (one statement, whatever its size).
			del, args = `seq <= ?`, []any{done[len(done)-1]}
		}
		if _, err := x.exec(ctx, `DELETE FROM timer_requests WHERE `+del, args...); err != nil {
			return TimerRequests{}, err
		}
	}
	return TimerRequests{Plan: p, At: at, Full: len(reqs) == limit, After: after}, nil
}

// requestFacts reads the webhooks the arms of reqs name and, when they
// could create more timers than p.Room, which of their keys name a timer
// (plan.Facts), in the batch's transaction.
func (s *Store) requestFacts(ctx context.Context, x q, reqs []plan.RequestRow, p hourglass.TimerRequestsParams) (plan.Facts, error) {
	f := plan.Facts{Webhooks: map[int64]*hourglass.Webhook{}, Room: p.Room, Max: p.Max}
	if ids := plan.ArmWebhooks(reqs); len(ids) > 0 {
		cond, args := in(s.d, "webhook_id", ids)
		var (
			id  int64
			typ string
		)
		err := x.each(ctx, `SELECT webhook_id, type FROM webhook_subscriptions WHERE `+cond, args, []any{&id, &typ}, func() error {
			w := f.Webhooks[id]
			if w == nil {
				w = &hourglass.Webhook{ID: id}
				f.Webhooks[id] = w
			}
			w.Events = append(w.Events, hourglass.EventType(typ))
			return nil
		})
		if err != nil {
			return f, err
		}
	}
	if !plan.NeedsExisting(reqs, p.Room) {
		return f, nil
	}
	f.Existing = map[string]bool{}
	keys := plan.ArmKeys(reqs)
	if len(keys) == 0 {
		return f, nil
	}
	cond, args := in(s.d, s.d.TimerKey, keys)
	if s.d.KeyArg != nil && !s.d.Arrays {
		for i, k := range keys {
			args[i] = s.d.KeyArg(k)
		}
	}
	var k string
	err := x.each(ctx, `SELECT `+s.d.TimerKey+` FROM timers WHERE `+cond, args, []any{&k}, func() error {
		f.Existing[k] = true
		return nil
	})
	return f, err
}

// heldKeys returns the keys of reqs with an earlier request reqs does not
// hold: none when no other transaction can hold one
// (Dialect.OneWriter). A plain read: it sees committed rows, locked or
// not.
func (s *Store) heldKeys(ctx context.Context, x q, reqs []plan.RequestRow) (map[string]bool, error) {
	held := map[string]bool{}
	keys := plan.HeldKeysToRead(reqs)
	if len(keys) == 0 || s.d.OneWriter {
		return held, nil
	}
	seqs := make([]int64, len(reqs))
	for i, r := range reqs {
		seqs[i] = r.Seq
	}
	inKeys, keyArgs := in(s.d, "timer_key", keys)
	inSeqs, seqArgs := in(s.d, "seq", seqs)
	var k string
	err := x.each(ctx, `SELECT DISTINCT timer_key FROM timer_requests WHERE seq < ? AND NOT (`+inSeqs+`) AND `+inKeys,
		append(append([]any{seqs[len(seqs)-1]}, seqArgs...), keyArgs...), []any{&k}, func() error {
			held[k] = true // compared with the batch's keys exactly, in the plan
			return nil
		})
	return held, err
}
