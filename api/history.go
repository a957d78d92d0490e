package api

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
)

// One thing's whole story (issue #39): GET /v1/orders/{id}/history,
// GET /v1/timers/{key}/history and GET /v1/sources/{name}/rows/{key}/history
// answer with a HistoryJSON: the thing's events in order, the stored
// deliveries of those events, and its timing: each deadline it had, when
// it was closed or fired, how late, what closed it and on which node.

// SourceRows reads a node's sources (--sources): which it runs, and
// their pending rows in the shop's table (source.Runner).
type SourceRows interface {
	// HasSource reports whether name is one of the node's sources. Safe
	// for concurrent use.
	HasSource(name string) bool
	// PendingRows returns up to p.Limit pending rows of the source name
	// due at or before p.Until, strictly after (p.After, p.AfterID) in
	// (deadline, key) order, bounded in time; ok false: no such source.
	PendingRows(ctx context.Context, name string, p hourglass.PendingDueParams) (rows []hourglass.DueItem, ok bool, err error)
}

// HistorySource is what the history routes read: the events and
// deliveries (hourglass.HistoryStore) and the attempt log.
type HistorySource interface {
	hourglass.HistoryStore
	// DeliveryAttempts is hourglass.AttemptLog's.
	DeliveryAttempts(ctx context.Context, orderID int64, limit int) ([]hourglass.DeliveryAttempt, error)
}

// Unknown is what a history says of a provenance that was not recorded
// (closes before it was, or by a caller that did not say).
const Unknown = "unknown"

// HistoryJSON is the response of the history routes. Exactly one of
// Order, Timer and Source/Key is set, by Kind.
type HistoryJSON struct {
	// Kind is "order", "timer" or "source_row".
	Kind   string          `json:"kind"`
	Order  json.RawMessage `json:"order"`
	Timer  json.RawMessage `json:"timer"`
	Source *string         `json:"source"`
	Key    *int64          `json:"key"`
	Timing TimingJSON      `json:"timing"`
	// Events are the latest hourglass.HistoryEventsMax events, oldest
	// first, each with its deliveries; EventsTruncated says earlier ones
	// were left out.
	Events          []HistoryEventJSON `json:"events"`
	EventsTruncated bool               `json:"events_truncated"`
	// DeliveriesTruncated says the events had more stored deliveries than
	// hourglass.HistoryDeliveriesMax, and some were left out;
	// AttemptsTruncated that more attempts than hourglass.MaxAttemptsListed
	// were logged, and the earliest were left out.
	DeliveriesTruncated bool `json:"deliveries_truncated"`
	AttemptsTruncated   bool `json:"attempts_truncated"`
}

// TimingJSON is when a thing was due and when, how and where it was
// closed or fired.
type TimingJSON struct {
	// Deadlines are the deadlines it had, in order: an order's first (null
	// when it was extended: the first deadline is not stored) and each
	// extension's; a timer's at each fire and its next while scheduled; a
	// source row's as closed.
	Deadlines []DeadlineJSON `json:"deadlines"`
	// Deadline is the one that counted: the latest, at the close or fire.
	Deadline *string `json:"deadline"`
	// ClosedAt is when it was closed (orders, source rows) or fired
	// (timers); null while it was not.
	ClosedAt *string `json:"closed_at"`
	// LatenessMs is ClosedAt - Deadline in milliseconds; null while not
	// closed or when the deadline is unknown.
	LatenessMs *int64 `json:"lateness_ms"`
	// ClosedBy is what closed or fired it (hourglass.CloseCause), or
	// "unknown" when that was not recorded; null while not closed.
	ClosedBy *string `json:"closed_by"`
	// Node is the node that closed or fired it, or "unknown".
	Node *string `json:"node"`
}

// DeadlineJSON is one deadline: what set it and when.
type DeadlineJSON struct {
	Deadline *string `json:"deadline"`
	SetBy    string  `json:"set_by"`
	SetAt    *string `json:"set_at"`
}

// HistoryEventJSON is one event. Deadline is the deadline an
// order.extended set, a timer.fired's fire_at or a source.closed's
// deadline; ClosedBy and Node an order.closed's, timer.fired's or
// source.closed's provenance ("unknown" when not recorded). Deliveries
// are its webhook deliveries, by id: those stored (pending, dead) and
// those the attempt log still tells of (delivered, or gone: a dead letter
// deleted, or its webhook).
type HistoryEventJSON struct {
	Seq        int64                 `json:"seq"`
	ID         string                `json:"id"`
	Type       string                `json:"type"`
	CreatedAt  string                `json:"created_at"`
	Deadline   *string               `json:"deadline"`
	ClosedBy   *string               `json:"closed_by"`
	Node       *string               `json:"node"`
	Deliveries []HistoryDeliveryJSON `json:"deliveries"`
}

// HistoryDeliveryJSON is one delivery of an event: its webhook, state
// ("pending", "dead", "delivered" or "gone"), how many attempts were made,
// the last one's error, and each attempt the log keeps.
type HistoryDeliveryJSON struct {
	ID            int64         `json:"id"`
	WebhookID     int64         `json:"webhook_id"`
	State         string        `json:"state"`
	AttemptCount  int           `json:"attempt_count"`
	NextAttemptAt *string       `json:"next_attempt_at"`
	LastError     *string       `json:"last_error"`
	FailedAt      *string       `json:"failed_at"`
	Attempts      []AttemptJSON `json:"attempts"`
}

// AttemptJSON is one logged delivery attempt: its number (1 for the
// first; a retried dead letter starts again at 1), when, the receiver's
// HTTP status (null: no answer), how long it took, what came of it
// ("delivered", "retry", "dead") and its error.
type AttemptJSON struct {
	Attempt    int     `json:"attempt"`
	At         *string `json:"at"`
	StatusCode *int    `json:"status_code"`
	DurationMs int64   `json:"duration_ms"`
	Outcome    string  `json:"outcome"`
	Error      *string `json:"error"`
}

func (s *Server) historyRoutes() []route {
	if s.cfg.History == nil {
		return nil
	}
	rs := []route{{"GET", "/v1/orders/{id}/history", s.orderHistory}}
	if s.cfg.Timers != nil {
		rs = append(rs, route{"GET", "/v1/timers/{key}/history", s.timerHistory})
	}
	if s.cfg.SourceRows != nil {
		rs = append(rs, route{"GET", "/v1/sources/{name}/rows/{key}/history", s.sourceRowHistory},
			route{"GET", "/v1/sources/{name}/rows", s.listSourceRows})
	}
	return rs
}

func (s *Server) orderHistory(r *http.Request, _ []byte) (int, any, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	o, err := s.cfg.Store.Order(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	h, attempts, err := s.history(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	out := newHistoryJSON("order", h, attempts)
	out.Order = hourglass.MarshalOrder(o.View(s.clock.Now()))
	out.Timing = orderTiming(o, h)
	return http.StatusOK, out, nil
}

func (s *Server) timerHistory(r *http.Request, _ []byte) (int, any, error) {
	key := r.PathValue("key")
	if err := hourglass.ValidateTimerKey(key); err != nil {
		return 0, nil, err
	}
	t, err := s.cfg.Timers.Timer(r.Context(), key)
	if err != nil {
		return 0, nil, err
	}
	h, attempts, err := s.history(r.Context(), t.ID)
	if err != nil {
		return 0, nil, err
	}
	out := newHistoryJSON("timer", h, attempts)
	out.Timer = timerJSON(t)
	out.Timing = timerTiming(t, h)
	return http.StatusOK, out, nil
}

func (s *Server) sourceRowHistory(r *http.Request, _ []byte) (int, any, error) {
	name, raw := r.PathValue("name"), r.PathValue("key")
	key, ok := parsePositive(raw)
	if !ok || key > hourglass.SourceKeyMax {
		return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "source row key %q: must be an integer from %d to %d, without sign or leading zeros",
			raw, hourglass.SourceKeyMin, hourglass.SourceKeyMax)
	}
	if !s.cfg.SourceRows.HasSource(name) {
		return 0, nil, hourglass.Errorf(hourglass.CodeNotFound, "no source %q on this node (--sources)", name)
	}
	h, attempts, err := s.history(r.Context(), hourglass.SourceEventOrderID(name, key))
	if err != nil {
		return 0, nil, err
	}
	// Another row's events may share the id (a hash): keep this row's,
	// its reminders (source.expiring) and its closes.
	kept := h.Events[:0]
	var (
		closes    []sourceBody
		lastClose = -1
	)
	for _, e := range h.Events {
		var b sourceBody
		if e.Type != hourglass.EventSourceClosed && e.Type != hourglass.EventSourceExpiring ||
			json.Unmarshal(e.Body, &b) != nil || b.Source != name || b.Key != key {
			continue
		}
		kept = append(kept, e)
		if e.Type == hourglass.EventSourceClosed {
			closes, lastClose = append(closes, b), len(kept)-1
		}
	}
	h.Events = kept
	if len(h.Events) == 0 {
		return 0, nil, hourglass.Errorf(hourglass.CodeNotFound, "source %s: row %d: hourglass has neither reminded nor closed it (no source.expiring or source.closed event; it may be pending, unknown or pruned)", name, key)
	}
	out := newHistoryJSON("source_row", h, attempts)
	out.Source, out.Key = &name, &key
	for _, e := range h.Events {
		if e.Type == hourglass.EventSourceClosed {
			out.Timing.Deadlines = append(out.Timing.Deadlines, DeadlineJSON{Deadline: bodyDeadline(e), SetBy: "source", SetAt: formatTime(e.CreatedAt)})
		}
	}
	if lastClose < 0 { // reminded, not closed yet: its deadline as the reminder saw it
		out.Timing.Deadline = bodyDeadline(h.Events[len(h.Events)-1])
		return http.StatusOK, out, nil
	}
	deadline, _ := time.Parse(time.RFC3339Nano, closes[len(closes)-1].Deadline)
	closeTiming(&out.Timing, deadline, h.Events[lastClose])
	return http.StatusOK, out, nil
}

// history reads a subject's history and its logged attempts at the
// default bounds.
func (s *Server) history(ctx context.Context, subject int64) (hourglass.History, []hourglass.DeliveryAttempt, error) {
	h, err := s.cfg.History.History(ctx, hourglass.HistoryParams{Subject: subject})
	if err != nil {
		return h, nil, err
	}
	attempts, err := s.cfg.History.DeliveryAttempts(ctx, subject, hourglass.MaxAttemptsListed)
	return h, attempts, err
}

// Bodies a history reads its deadlines from (hourglass's own, stored with
// the event).
type (
	orderBody struct {
		Order struct {
			Deadline string `json:"deadline"`
		} `json:"order"`
	}
	timerBody struct {
		Timer struct {
			FireAt string `json:"fire_at"`
		} `json:"timer"`
	}
	sourceBody struct {
		Source   string `json:"source"`
		Key      int64  `json:"key"`
		Deadline string `json:"deadline"`
	}
)

// bodyDeadline returns the deadline an event's body names: an
// order.extended's, a timer.fired's fire_at, an order.expiring's (the
// deadline it reminded of), a source.closed's or source.expiring's.
func bodyDeadline(e hourglass.HistoryEvent) *string {
	if len(e.Body) == 0 {
		return nil
	}
	var d string
	switch e.Type {
	case hourglass.EventOrderExtended:
		var b orderBody
		if json.Unmarshal(e.Body, &b) == nil {
			d = b.Order.Deadline
		}
	case hourglass.EventTimerFired:
		var b timerBody
		if json.Unmarshal(e.Body, &b) == nil {
			d = b.Timer.FireAt
		}
	case hourglass.EventOrderExpiring, hourglass.EventSourceClosed, hourglass.EventSourceExpiring:
		var b sourceBody // each has a top-level "deadline"
		if json.Unmarshal(e.Body, &b) == nil {
			d = b.Deadline
		}
	}
	return optString(d)
}

// closes reports whether an event type is a close or a fire, which records
// a provenance.
func closes(t hourglass.EventType) bool {
	return t == hourglass.EventOrderClosed || t == hourglass.EventTimerFired || t == hourglass.EventSourceClosed
}

func newHistoryJSON(kind string, h hourglass.History, attempts []hourglass.DeliveryAttempt) HistoryJSON {
	out := HistoryJSON{Kind: kind, Events: make([]HistoryEventJSON, len(h.Events)), EventsTruncated: h.EventsTruncated,
		DeliveriesTruncated: h.DeliveriesTruncated, AttemptsTruncated: len(attempts) >= hourglass.MaxAttemptsListed,
		Timing: TimingJSON{Deadlines: []DeadlineJSON{}}}
	bySeq := make(map[int64]int, len(h.Events))
	byID := make(map[string]int, len(h.Events))
	for i, e := range h.Events {
		bySeq[e.Seq], byID[e.ID] = i, i
		ev := HistoryEventJSON{Seq: e.Seq, ID: e.ID, Type: string(e.Type), CreatedAt: *formatTime(e.CreatedAt), Deadline: bodyDeadline(e),
			Deliveries: []HistoryDeliveryJSON{}}
		if closes(e.Type) {
			ev.ClosedBy, ev.Node = provenance(e.By)
		}
		out.Events[i] = ev
	}
	for _, d := range h.Deliveries {
		i, ok := bySeq[d.EventSeq]
		if !ok {
			continue
		}
		dj := HistoryDeliveryJSON{ID: d.ID, WebhookID: d.WebhookID, State: d.State, AttemptCount: d.Attempts, Attempts: []AttemptJSON{},
			NextAttemptAt: formatTime(d.NextAttemptAt), LastError: optString(d.LastError), FailedAt: formatTime(d.FailedAt)}
		if d.State == "dead" {
			dj.NextAttemptAt = nil
		}
		out.Events[i].Deliveries = append(out.Events[i].Deliveries, dj)
	}
	addAttempts(&out, byID, attempts)
	return out
}

// provenance renders a Closer, "unknown" for what was not recorded.
func provenance(c hourglass.Closer) (cause, node *string) {
	cs, ns := Unknown, Unknown
	if c.Known() {
		cs = string(c.Cause)
		if c.Node != "" {
			ns = c.Node
		}
	}
	return &cs, &ns
}

// closeTiming fills the close's fields of t from the close event e, the
// deadline that counted (zero: unknown).
func closeTiming(t *TimingJSON, deadline time.Time, e hourglass.HistoryEvent) {
	t.Deadline = formatTime(deadline)
	t.ClosedAt = formatTime(e.CreatedAt)
	if !deadline.IsZero() {
		late := hourglass.UnixMilli(e.CreatedAt) - hourglass.UnixMilli(deadline)
		t.LatenessMs = &late
	}
	t.ClosedBy, t.Node = provenance(e.By)
}

// orderTiming is an order's timing: its deadlines (the first, unknown
// when it was extended, then each extension's), and its close.
func orderTiming(o hourglass.Order, h hourglass.History) TimingJSON {
	t := TimingJSON{Deadlines: []DeadlineJSON{}, Deadline: formatTime(o.Deadline)}
	var extensions []DeadlineJSON
	var closed *hourglass.HistoryEvent
	for i, e := range h.Events {
		switch e.Type {
		case hourglass.EventOrderExtended:
			extensions = append(extensions, DeadlineJSON{Deadline: bodyDeadline(e), SetBy: string(e.Type), SetAt: formatTime(e.CreatedAt)})
		case hourglass.EventOrderClosed:
			closed = &h.Events[i]
		}
	}
	first := DeadlineJSON{SetBy: string(hourglass.EventOrderCreated), SetAt: formatTime(o.CreatedAt)}
	if len(extensions) == 0 && !h.EventsTruncated {
		first.Deadline = formatTime(o.Deadline)
	}
	t.Deadlines = append(append(t.Deadlines, first), extensions...)
	if closed != nil {
		closeTiming(&t, o.Deadline, *closed)
	} else if o.Status == hourglass.StateClosed {
		// Closed, its event pruned: the row keeps when, not by what.
		t.ClosedAt = formatTime(o.ClosedAt)
		late := hourglass.UnixMilli(o.ClosedAt) - hourglass.UnixMilli(o.Deadline)
		t.LatenessMs = &late
		t.ClosedBy, t.Node = provenance(hourglass.Closer{})
	}
	return t
}

// timerTiming is a timer's timing: the fire_at of each fire, and its next
// while scheduled; the latest fire's lateness and provenance.
func timerTiming(tm hourglass.Timer, h hourglass.History) TimingJSON {
	t := TimingJSON{Deadlines: []DeadlineJSON{}}
	var fired *hourglass.HistoryEvent
	var firedAt time.Time
	for i, e := range h.Events {
		if e.Type != hourglass.EventTimerFired {
			continue
		}
		d := bodyDeadline(e)
		t.Deadlines = append(t.Deadlines, DeadlineJSON{Deadline: d, SetBy: "timer.armed", SetAt: nil})
		fired = &h.Events[i]
		firedAt = time.Time{}
		if d != nil {
			firedAt, _ = time.Parse(time.RFC3339Nano, *d)
		}
	}
	if tm.Status == hourglass.TimerScheduled {
		t.Deadlines = append(t.Deadlines, DeadlineJSON{Deadline: formatTime(tm.FireAt), SetBy: "timer.armed", SetAt: formatTime(tm.UpdatedAt)})
		t.Deadline = formatTime(tm.FireAt)
		return t
	}
	if fired != nil {
		closeTiming(&t, firedAt, *fired)
		return t
	}
	t.Deadline = formatTime(tm.FireAt)
	if tm.Status == hourglass.TimerFired { // its event pruned
		t.ClosedAt = formatTime(tm.FiredAt)
		late := hourglass.UnixMilli(tm.FiredAt) - hourglass.UnixMilli(tm.FireAt)
		t.LatenessMs = &late
		t.ClosedBy, t.Node = provenance(hourglass.Closer{})
	}
	return t
}

// addAttempts hangs each logged attempt on its delivery, and adds the
// deliveries whose rows are gone (delivered, or deleted) from the attempts
// alone, each under its event.
func addAttempts(out *HistoryJSON, byID map[string]int, attempts []hourglass.DeliveryAttempt) {
	for _, a := range attempts {
		i, ok := byID[a.EventID]
		if !ok {
			continue // an event left out (or another row's)
		}
		ds := out.Events[i].Deliveries
		j := slices.IndexFunc(ds, func(d HistoryDeliveryJSON) bool { return d.ID == a.DeliveryID })
		if j < 0 {
			ds = append(ds, HistoryDeliveryJSON{ID: a.DeliveryID, WebhookID: a.WebhookID, Attempts: []AttemptJSON{}})
			j = len(ds) - 1
		}
		d := &ds[j]
		aj := AttemptJSON{Attempt: a.Attempt, At: formatTime(a.At), DurationMs: a.Duration.Milliseconds(), Outcome: a.Outcome, Error: optString(a.Error)}
		if a.StatusCode != 0 {
			aj.StatusCode = &a.StatusCode
		}
		d.Attempts = append(d.Attempts, aj)
		if d.State == "" || d.State == "delivered" || d.State == "gone" { // known from the log alone
			d.State, d.AttemptCount, d.LastError = "gone", a.Attempt, optString(a.Error)
			if a.Outcome == hourglass.AttemptDelivered {
				d.State = "delivered"
			}
		}
		out.Events[i].Deliveries = ds
	}
	for i := range out.Events {
		slices.SortFunc(out.Events[i].Deliveries, func(a, b HistoryDeliveryJSON) int { return cmp.Compare(a.ID, b.ID) })
	}
}
