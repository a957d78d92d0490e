package batch

import (
	"context"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
)

// attempts applies the batch's webhook delivery attempts (Attempt ops,
// a compare-and-set on state pending and the attempt count) in queue order
// on their delivery rows, locked by id, and writes each changed row once: a
// delivered one deleted, a retried or dead one updated. An attempt not
// recorded (another attempt was first, or the delivery is gone) writes
// nothing. Each recorded attempt that resolves its delivery gets the next
// delivery of its (webhook, order) stream, read after the writes.
func (b *batch) attempts(ctx context.Context) error {
	var ids []int64
	for _, o := range b.ops {
		if o.Kind == Attempt {
			ids = append(ids, o.Attempt.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rows, err := b.tx.LockDeliveries(ctx, ids)
	if err != nil {
		return err
	}
	locked := make(map[int64]*Delivery, len(rows))
	for _, d := range rows {
		locked[d.ID] = d
	}
	var resolved []int // ops whose recorded attempt resolved their delivery
	var logged []hourglass.DeliveryAttempt
	for i, o := range b.ops {
		if o.Kind != Attempt {
			continue
		}
		r := o.Attempt
		d := locked[r.ID]
		if d == nil || d.gone || d.Dead || d.Attempts != r.Attempts {
			continue
		}
		b.res[i].Record.Recorded = true
		d.touched = true
		logged = append(logged, logEntry(r, d.Attempts+1))
		switch {
		case r.OK:
			d.gone = true
		case r.RetryAt.IsZero():
			d.Dead, d.Attempts, d.LastError = true, d.Attempts+1, r.Error
		default:
			d.Attempts, d.LastError, d.NextAt = d.Attempts+1, r.Error, r.RetryAt
		}
		if r.Resolves() {
			resolved = append(resolved, i)
		}
	}
	var gone []int64
	for _, id := range ids {
		switch d := locked[id]; {
		case d == nil || !d.touched:
		case d.gone:
			gone = append(gone, id)
		default:
			if err := b.tx.UpdateDelivery(ctx, d, b.now); err != nil {
				return err
			}
		}
	}
	if len(gone) > 0 {
		if err := b.tx.DeleteDeliveries(ctx, gone); err != nil {
			return err
		}
	}
	if len(logged) > 0 {
		if err := b.tx.InsertAttempts(ctx, logged); err != nil {
			return err
		}
	}
	if len(resolved) == 0 {
		return nil
	}
	var streams []Stream
	seen := map[Stream]bool{}
	for _, i := range resolved {
		r := b.ops[i].Attempt
		if st := (Stream{r.WebhookID, r.OrderID}); !seen[st] {
			seen[st] = true
			streams = append(streams, st)
		}
	}
	heads, err := b.tx.StreamHeads(ctx, streams)
	if err != nil {
		return err
	}
	for _, i := range resolved {
		r := b.ops[i].Attempt
		b.res[i].Record.Next = heads[Stream{r.WebhookID, r.OrderID}]
	}
	return nil
}

// logEntry is the attempt log's record of r, the delivery's attempt number
// attempt. Text is cut to what the log keeps (hourglass.MaxAttemptError).
func logEntry(r hourglass.AttemptResult, attempt int) hourglass.DeliveryAttempt {
	a := hourglass.DeliveryAttempt{OrderID: r.OrderID, DeliveryID: r.ID, WebhookID: r.WebhookID, EventID: r.EventID,
		EventType: r.EventType, Attempt: attempt, At: r.At, Duration: max(r.Duration, 0), StatusCode: r.StatusCode}
	switch {
	case r.OK:
		a.Outcome = hourglass.AttemptDelivered
	case r.RetryAt.IsZero():
		a.Outcome, a.Error = hourglass.AttemptDead, r.Error
	default:
		a.Outcome, a.Error = hourglass.AttemptRetry, r.Error
	}
	if len(a.Error) > hourglass.MaxAttemptError {
		a.Error = hourglass.TruncateText(a.Error, hourglass.MaxAttemptError)
	}
	if a.At.IsZero() {
		a.Duration = 0 // recorded again after a failed record: its sending is unknown
	}
	a.Duration = a.Duration.Truncate(time.Millisecond)
	return a
}
