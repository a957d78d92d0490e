package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Limits of GET /v1/timers (a page also ends at MaxPageBytes).
const (
	TimerLimitDefault = 50
	MaxTimerLimit     = 1000
	// timerBatch is how many timers a page reads from the store at once:
	// MaxPageBytes of the largest payloads.
	timerBatch = MaxPageBytes / hourglass.MaxTimerPayload
)

// timerRoutes returns the /v1/timers routes, or none when no TimerStore is
// configured.
func (s *Server) timerRoutes() []route {
	if s.cfg.Timers == nil {
		return nil
	}
	return []route{
		{"PUT", "/v1/timers/{key}", s.armTimer},
		{"GET", "/v1/timers/{key}", s.getTimer},
		{"DELETE", "/v1/timers/{key}", s.cancelTimer},
		{"GET", "/v1/timers", s.listTimers},
	}
}

// TimerJSON is the wire form of a timer, as the client decodes it
// (hourglass.MarshalTimer writes it, for responses and timer.fired events).
type TimerJSON struct {
	Key       string          `json:"key"`
	Status    string          `json:"status"`
	FireAt    string          `json:"fire_at"`
	FiredAt   *string         `json:"fired_at"`
	Payload   json.RawMessage `json:"payload"`
	WebhookID *int64          `json:"webhook_id"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
}

// TimerListJSON is the body of GET /v1/timers.
type TimerListJSON struct {
	Timers []TimerJSON `json:"timers"`
	Next   *string     `json:"next"`
}

// timerJSON renders t as hourglass.MarshalTimer does for timer.fired
// events: one encoder, so the API's object and the event's cannot drift.
func timerJSON(t hourglass.Timer) json.RawMessage { return hourglass.MarshalTimer(t) }

type armTimerRequest struct {
	FireAt    *string         `json:"fire_at"`
	DelayMs   *int64          `json:"delay_ms"`
	Payload   json.RawMessage `json:"payload"`
	WebhookID *int64          `json:"webhook_id"`
}

// DecodeArmTimer parses and validates a PUT /v1/timers/{key} body for key.
// It returns the store parameters with a hash of the request's meaning, so
// a repeat of the same request is recognised. Every error is an
// invalid_argument *hourglass.Error naming the field.
func DecodeArmTimer(key string, body []byte) (hourglass.ArmTimerParams, error) {
	if err := hourglass.ValidateTimerKey(key); err != nil {
		return hourglass.ArmTimerParams{}, err
	}
	var req armTimerRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return hourglass.ArmTimerParams{}, err
	}
	p := hourglass.ArmTimerParams{Key: key}
	h := sha256.New()
	switch {
	case req.FireAt != nil && req.DelayMs != nil:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "fire_at, delay_ms: give exactly one, not both")
	case req.FireAt != nil:
		t, err := time.Parse(time.RFC3339Nano, *req.FireAt)
		if err != nil {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "fire_at: %q is not an RFC 3339 time (e.g. 2026-11-24T10:00:00.000Z)", *req.FireAt)
		}
		if y := t.UTC().Year(); y > 9999 {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "fire_at: %q is after 9999-12-31T23:59:59.999Z", *req.FireAt)
		}
		// Times are whole milliseconds: round up, so a timer never fires
		// before the time asked for.
		ms := hourglass.UnixMilli(t)
		if t.After(hourglass.FromUnixMilli(ms)) {
			ms++
		}
		// A time in the past means now, however far back: one before the
		// epoch is sent to the store as the epoch's first millisecond, which
		// is as past as any.
		p.FireAt = hourglass.FromUnixMilli(max(ms, 1))
		fmt.Fprintf(h, "at\x00%d\x00", hourglass.UnixMilli(p.FireAt))
	case req.DelayMs != nil:
		ms := *req.DelayMs
		if ms < 0 || ms > hourglass.MaxTimerDelay.Milliseconds() {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "delay_ms: must be 0 to %d, got %d", hourglass.MaxTimerDelay.Milliseconds(), ms)
		}
		p.Delay = time.Duration(ms) * time.Millisecond
		fmt.Fprintf(h, "delay\x00%d\x00", ms)
	default:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "fire_at, delay_ms: one of them is required")
	}
	if req.Payload != nil && !bytes.Equal(req.Payload, []byte("null")) {
		p.Payload = bytes.TrimSpace(req.Payload)
	}
	if req.WebhookID != nil {
		if *req.WebhookID < 1 {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "webhook_id: must be a webhook's id (a positive integer), got %d", *req.WebhookID)
		}
		p.WebhookID = *req.WebhookID
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	// The payload is hashed as given: a retry sends the same bytes.
	fmt.Fprintf(h, "%d\x00%d\x00", p.WebhookID, len(p.Payload))
	h.Write(p.Payload)
	p.RequestHash = h.Sum(nil)
	return p, nil
}

// checkFireAt refuses a fire_at more than hourglass.MaxTimerDelay after
// now, as delay_ms is refused beyond it: a timer is for the coming year, not
// for year 9999. Errors: invalid_argument.
func checkFireAt(fireAt, now time.Time) error {
	if latest := now.Add(hourglass.MaxTimerDelay); fireAt.After(latest) {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "fire_at: must be at most %d days ahead (%s now), got %s",
			hourglass.MaxTimerDelay/(24*time.Hour), latest.UTC().Format(TimeFormat), fireAt.UTC().Format(TimeFormat))
	}
	return nil
}

// webhookLookup finds one webhook: the WebhookService has it, and so has a
// store that keeps webhooks besides timers (hourglass.WebhookStore).
type webhookLookup interface {
	Webhook(ctx context.Context, id int64) (hourglass.Webhook, error)
}

// checkTimerWebhook refuses a timer's webhook_id that does not name a
// webhook subscribed to timer.fired (or "*"): otherwise any client could
// have arbitrary JSON signed with that webhook's secret and sent to a
// receiver that never asked for timers. Webhooks cannot be changed, only
// deleted, and the store refuses an id that names none when it arms, so a
// check before the arm is enough. Errors: invalid_argument, or the
// lookup's (unavailable).
func (s *Server) checkTimerWebhook(ctx context.Context, id int64) error {
	if id == 0 {
		return nil
	}
	var lookup webhookLookup
	if s.cfg.Webhooks != nil {
		lookup = s.cfg.Webhooks
	} else if l, ok := s.cfg.Timers.(webhookLookup); ok {
		lookup = l
	}
	if lookup == nil {
		return nil // the store refuses an id that names no webhook
	}
	w, err := lookup.Webhook(ctx, id)
	if errors.Is(err, hourglass.ErrNotFound) {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "webhook_id: webhook %d not found", id)
	}
	if err != nil {
		return err
	}
	if !w.Subscribes(hourglass.EventTimerFired) {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "webhook_id: webhook %d is not subscribed to %s (its events: %v); create one subscribed to %q or \"*\"",
			id, hourglass.EventTimerFired, w.Events, hourglass.EventTimerFired)
	}
	return nil
}

func (s *Server) armTimer(r *http.Request, body []byte) (int, any, error) {
	p, err := DecodeArmTimer(r.PathValue("key"), body)
	if err != nil {
		return 0, nil, err
	}
	if err := checkFireAt(p.FireAt, s.clock.Now()); err != nil {
		return 0, nil, err
	}
	if err := s.checkTimerWebhook(r.Context(), p.WebhookID); err != nil {
		return 0, nil, err
	}
	t, created, err := s.cfg.Timers.ArmTimer(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	if created {
		return http.StatusCreated, timerJSON(t), nil
	}
	return http.StatusOK, timerJSON(t), nil
}

func (s *Server) getTimer(r *http.Request, _ []byte) (int, any, error) {
	key := r.PathValue("key")
	if err := hourglass.ValidateTimerKey(key); err != nil {
		return 0, nil, err
	}
	t, err := s.cfg.Timers.Timer(r.Context(), key)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, timerJSON(t), nil
}

func (s *Server) cancelTimer(r *http.Request, _ []byte) (int, any, error) {
	key := r.PathValue("key")
	if err := hourglass.ValidateTimerKey(key); err != nil {
		return 0, nil, err
	}
	t, err := s.cfg.Timers.CancelTimer(r.Context(), key)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, timerJSON(t), nil
}

func (s *Server) listTimers(r *http.Request, _ []byte) (int, any, error) {
	q := r.URL.Query()
	known := []string{"status", "limit", "after"}
	for k := range q {
		if !slices.Contains(known, k) {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "unknown query parameter %q (want %s)", k, strings.Join(known, ", "))
		}
	}
	f := hourglass.TimerFilter{Limit: TimerLimitDefault}
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTimerLimit {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be an integer from 1 to %d, got %q", MaxTimerLimit, v)
		}
		f.Limit = n
	}
	if q.Has("after") {
		f.After = q.Get("after")
		if err := hourglass.ValidateTimerKey(f.After); err != nil {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "after: must be a timer key, %s", strings.TrimPrefix(hourglass.ErrorMessage(err), "key: "))
		}
	}
	if q.Get("status") != "" { // empty: every status, as for orders
		f.Status = hourglass.TimerStatus(q.Get("status"))
		if !f.Status.Valid() {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "status: must be scheduled, fired or cancelled, got %q", q.Get("status"))
		}
	}
	// A timer's payload may be MaxTimerPayload bytes: timerBatch at a
	// time, a page of 1,000 is never all in memory, and a full page reads
	// at most one batch past MaxPageBytes.
	page := newPage(r, "timers")
	next, err := fillPage(page, f.Limit, timerBatch, f.After,
		func(after string, n int) ([]hourglass.Timer, error) {
			f.After, f.Limit = after, n
			return s.cfg.Timers.Timers(r.Context(), f)
		},
		func(t hourglass.Timer) any { return timerJSON(t) },
		func(t hourglass.Timer) string { return t.Key })
	if err != nil {
		return 0, nil, err
	}
	out, err := page.finish(next)
	return http.StatusOK, out, err
}
