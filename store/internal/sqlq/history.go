package sqlq

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hourglass/hourglass"
)

// History implements hourglass.HistoryStore: the subject's latest events
// backwards through events_order_seq, then their deliveries through
// webhook_deliveries_event (one look-up per event).
func (s *Store) History(ctx context.Context, p hourglass.HistoryParams) (hourglass.History, error) {
	p = p.Bounded()
	var h hourglass.History
	err := s.read(ctx, "history", func(x q) error {
		h = hourglass.History{}
		evQuery, evArgs := s.HistoryEventsSQL(p)
		var (
			e           hourglass.HistoryEvent
			typ         string
			created     int64
			cause, node *string
		)
		err := x.each(ctx, evQuery, evArgs, []any{&e.Seq, &e.ID, &typ, &created, &e.Body, &cause, &node}, func() error {
			ev := e
			ev.Type, ev.CreatedAt, ev.By = hourglass.EventType(typ), hourglass.FromUnixMilli(created), closerOf(cause, node)
			h.Events = append(h.Events, ev)
			e.Body, cause, node = nil, nil, nil
			return nil
		})
		if err != nil {
			return err
		}
		if len(h.Events) > p.MaxEvents {
			h.Events, h.EventsTruncated = h.Events[:p.MaxEvents], true
		}
		slices.Reverse(h.Events)
		if len(h.Events) == 0 {
			return nil
		}
		if err := x.renderReminders(ctx, p.Subject, h.Events); err != nil {
			return err
		}
		seqs := make([]int64, len(h.Events))
		for i, ev := range h.Events {
			seqs[i] = ev.Seq
		}
		dQuery, dArgs := s.HistoryDeliveriesSQL(seqs, p.MaxDeliveries)
		var (
			d        hourglass.HistoryDelivery
			next     int64
			lastErr  *string
			failedAt *int64
		)
		err = x.each(ctx, dQuery, dArgs, []any{&d.ID, &d.WebhookID, &d.EventSeq, &d.State, &d.Attempts, &next, &lastErr, &failedAt}, func() error {
			dv := d
			dv.NextAttemptAt = hourglass.FromUnixMilli(next)
			if lastErr != nil {
				dv.LastError = *lastErr
			}
			if failedAt != nil {
				dv.FailedAt = hourglass.FromUnixMilli(*failedAt)
			}
			h.Deliveries = append(h.Deliveries, dv)
			lastErr, failedAt = nil, nil
			return nil
		})
		if err != nil {
			return err
		}
		if len(h.Deliveries) > p.MaxDeliveries {
			h.Deliveries, h.DeliveriesTruncated = h.Deliveries[:p.MaxDeliveries], true
		}
		return nil
	})
	return h, err
}

// HistoryEventsSQL is History's events statement: one more than
// p.MaxEvents, latest first (exported for the stores' plan tests).
func (s *Store) HistoryEventsSQL(p hourglass.HistoryParams) (string, []any) {
	p = p.Bounded()
	return `SELECT seq, id, type, created_at, body, cause, node FROM ` + s.d.From("events", "events_order_seq") +
		` WHERE order_id = ? ORDER BY order_id DESC, seq DESC LIMIT ?`, []any{p.Subject, p.MaxEvents + 1}
}

// HistoryDeliveriesSQL is History's deliveries statement for the events
// of seqs: one more than limit, by id (exported for the plan tests).
func (s *Store) HistoryDeliveriesSQL(seqs []int64, limit int) (string, []any) {
	args := make([]any, 0, len(seqs)+1)
	for _, seq := range seqs {
		args = append(args, seq)
	}
	args = append(args, limit+1)
	return `SELECT id, webhook_id, event_seq, state, attempts, next_attempt_at, last_error, failed_at FROM ` +
		s.d.From("webhook_deliveries", "webhook_deliveries_event") +
		` WHERE event_seq IN (?` + strings.Repeat(", ?", len(seqs)-1) + `) ORDER BY id LIMIT ?`, args
}

// SourceClosedEvents implements hourglass.HistoryStore through
// events_source_closed.
func (s *Store) SourceClosedEvents(ctx context.Context, after int64, limit int) ([]hourglass.HistoryEvent, error) {
	if limit < 1 || limit > hourglass.SourceClosedScanMax {
		return nil, fmt.Errorf("source closed events: limit must be from 1 to %d, got %d", hourglass.SourceClosedScanMax, limit)
	}
	query, args := s.SourceClosedEventsSQL(after, limit)
	var out []hourglass.HistoryEvent
	err := s.read(ctx, "source closed events", func(x q) error {
		out = out[:0]
		var (
			e           hourglass.HistoryEvent
			created     int64
			cause, node *string
		)
		return x.each(ctx, query, args, []any{&e.Seq, &e.ID, &created, &e.Body, &cause, &node}, func() error {
			ev := e
			ev.Type, ev.CreatedAt, ev.By = hourglass.EventSourceClosed, hourglass.FromUnixMilli(created), closerOf(cause, node)
			out = append(out, ev)
			e.Body, cause, node = nil, nil, nil
			return nil
		})
	})
	return out, err
}

// SourceClosedEventsSQL is SourceClosedEvents' statement (exported for
// the plan tests).
func (s *Store) SourceClosedEventsSQL(after int64, limit int) (string, []any) {
	return `SELECT seq, id, created_at, body, cause, node FROM ` + s.d.From("events", "events_source_closed") +
		` WHERE type = 'source.closed' AND seq > ? ORDER BY seq LIMIT ?`, []any{after, limit}
}

// closerOf is an event's provenance from its cause and node columns (NULL:
// not recorded).
func closerOf(cause, node *string) hourglass.Closer {
	var c hourglass.Closer
	if cause != nil {
		c.Cause = hourglass.CloseCause(*cause)
	}
	if node != nil {
		c.Node = *node
	}
	return c
}
