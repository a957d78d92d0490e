package postgres

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/jackc/pgx/v5"
)

// RecordAttempt implements hourglass.DeliveryStore: a compare-and-set on
// (state pending, attempts); false when another attempt was recorded first
// or the delivery is gone. Attempts are group-committed by the writer in
// its low lane (see writer.go): a delivery backlog's bookkeeping shares
// transactions instead of committing once per attempt, and takes only the
// room that closes and API writes leave. Errors: unavailable.
func (s *Store) RecordAttempt(ctx context.Context, r hourglass.AttemptResult) (hourglass.AttemptRecord, error) {
	o := &op{kind: opRecordAttempt, attempt: r}
	if err := s.w.Submit(ctx, writer.Low, o); err != nil {
		return hourglass.AttemptRecord{}, err
	}
	return o.record, nil
}

// The attempts of a batch, set-based: $1..$5 one element per attempt
// (delivery id, attempts before it, outcome, retry time, error), $6 the now
// parameter. It returns the (id, attempts) of each attempt recorded.
const recordAttemptsSQL = `WITH a AS (
	SELECT * FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::bigint[], $5::text[]) AS a(id, attempts, outcome, retry_at, err)
), del AS (
	DELETE FROM webhook_deliveries d USING a
	WHERE a.outcome = 'ok' AND d.id = a.id AND d.state = 'pending' AND d.attempts = a.attempts
	RETURNING d.id, a.attempts
), upd AS (
	UPDATE webhook_deliveries d SET
		state = CASE a.outcome WHEN 'dead' THEN 'dead' ELSE 'pending' END,
		attempts = a.attempts + 1,
		last_error = a.err,
		next_attempt_at = CASE a.outcome WHEN 'retry' THEN a.retry_at ELSE d.next_attempt_at END,
		failed_at = CASE a.outcome WHEN 'dead' THEN COALESCE($6::bigint, ` + dbNow + `) ELSE d.failed_at END
	FROM a WHERE a.outcome <> 'ok' AND d.id = a.id AND d.state = 'pending' AND d.attempts = a.attempts
	RETURNING d.id, a.attempts
)
SELECT id, attempts FROM del UNION ALL SELECT id, attempts FROM upd`

// The head of each listed (webhook, order) stream after the attempts: a
// later statement of the same transaction, so it sees them.
const streamHeadsSQL = `SELECT s.w, s.o, n.id, n.next_attempt_at FROM unnest($1::bigint[], $2::bigint[]) AS s(w, o)
CROSS JOIN LATERAL (SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE webhook_id = s.w AND order_id = s.o AND state = 'pending' ORDER BY event_seq LIMIT 1) n`

// queueAttempts queues the recording of attempts (two statements whatever
// their number) and, for each recorded attempt that resolves its delivery,
// the next delivery of its stream. Queued before COMMIT in one pipeline,
// its callbacks only record: a result that cannot be read is reported in
// *readErr after the batch, and the attempts read as not recorded (their
// deliveries are attempted again, and a second record finds them gone).
func queueAttempts(b *pgx.Batch, attempts []*op, now any, readErr *error) {
	if len(attempts) == 0 {
		return
	}
	type key struct {
		id       int64
		attempts int32
	}
	// Of several attempts with the same delivery and attempt count (racing
	// workers), at most one can be recorded: the batch sends the first, and
	// the others read as recorded by another attempt first.
	first := make(map[key]*op, len(attempts))
	var ids, retryAt []int64
	var counts []int32
	var outcomes, errs []string
	type stream struct{ webhook, order int64 }
	var heads []stream
	for _, o := range attempts {
		r := o.attempt
		k := key{r.ID, int32(r.Attempts)}
		if first[k] != nil {
			continue
		}
		first[k] = o
		outcome, at := "retry", hourglass.UnixMilli(r.RetryAt)
		switch {
		case r.OK:
			outcome, at = "ok", 0
		case r.RetryAt.IsZero():
			outcome, at = "dead", 0
		}
		ids, counts, outcomes, retryAt, errs = append(ids, r.ID), append(counts, k.attempts), append(outcomes, outcome), append(retryAt, at), append(errs, r.Error)
		if r.Resolves() {
			heads = append(heads, stream{r.WebhookID, r.OrderID})
		}
	}
	b.Queue(recordAttemptsSQL, ids, counts, outcomes, retryAt, errs, now).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var k key
			if err := rows.Scan(&k.id, &k.attempts); err != nil {
				*readErr = err
				return nil
			}
			if o := first[k]; o != nil {
				o.record.Recorded = true
			}
		}
		*readErr = rows.Err()
		return nil
	})
	if len(heads) == 0 {
		return
	}
	hw, ho := make([]int64, len(heads)), make([]int64, len(heads))
	for i, h := range heads {
		hw[i], ho[i] = h.webhook, h.order
	}
	b.Queue(streamHeadsSQL, hw, ho).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		next := make(map[stream]hourglass.DeliveryTimer, len(heads))
		for rows.Next() {
			var (
				st     stream
				id, at int64
			)
			if err := rows.Scan(&st.webhook, &st.order, &id, &at); err != nil {
				*readErr = err
				return nil
			}
			next[st] = hourglass.DeliveryTimer{ID: id, At: hourglass.FromUnixMilli(at)}
		}
		if *readErr = rows.Err(); *readErr != nil {
			return nil
		}
		for _, o := range attempts {
			if o.record.Recorded && o.attempt.Resolves() {
				o.record.Next = next[stream{o.attempt.WebhookID, o.attempt.OrderID}]
			}
		}
		return nil
	})
}
