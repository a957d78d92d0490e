package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
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

// DecodeArmTimer parses a PUT /v1/timers/{key} body for key and checks it
// at now as every arm is checked (hourglass.TimerArm.Params, which the
// timer_requests applier runs too). It returns the store parameters with a
// hash of the request's meaning, so a repeat of the same request is
// recognised. Every error is an invalid_argument *hourglass.Error naming
// the field.
func DecodeArmTimer(key string, body []byte, now time.Time) (hourglass.ArmTimerParams, error) {
	if err := hourglass.ValidateTimerKey(key); err != nil {
		return hourglass.ArmTimerParams{}, err
	}
	var req armTimerRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return hourglass.ArmTimerParams{}, err
	}
	return req.params(key, now)
}

// params checks the arm of key that req asks for at now (DecodeArmTimer;
// each arm of POST /v1/timers/batch).
func (req armTimerRequest) params(key string, now time.Time) (hourglass.ArmTimerParams, error) {
	a := hourglass.TimerArm{Key: key, DelayMs: req.DelayMs, Payload: req.Payload, WebhookID: req.WebhookID}
	if req.FireAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *req.FireAt)
		if err != nil {
			return hourglass.ArmTimerParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "fire_at: %q is not an RFC 3339 time (e.g. 2026-11-24T10:00:00.000Z)", *req.FireAt)
		}
		a.FireAt = &t
	}
	return a.Params(now)
}

// webhookLookup finds one webhook: the WebhookService has it, and so has a
// store that keeps webhooks besides timers (hourglass.WebhookStore).
type webhookLookup interface {
	Webhook(ctx context.Context, id int64) (hourglass.Webhook, error)
}

// checkTimerWebhook refuses a timer's webhook_id that does not name a
// webhook subscribed to timer.fired (or "*"): hourglass.CheckTimerWebhook,
// on the webhook looked up. Webhooks cannot be changed, only deleted, and
// the store refuses an id that names none when it arms, so a check before
// the arm is enough. Errors: invalid_argument, or the lookup's
// (unavailable).
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
		return hourglass.CheckTimerWebhook(id, nil)
	}
	if err != nil {
		return err
	}
	return hourglass.CheckTimerWebhook(id, &w)
}

func (s *Server) armTimer(r *http.Request, body []byte) (int, any, error) {
	p, err := DecodeArmTimer(r.PathValue("key"), body, s.clock.Now())
	if err != nil {
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

// timerListParams are GET /v1/timers' filters, beside limit and after.
var timerListParams = []string{"status", "prefix", "fire_after", "fire_before"}

// parseTimerFilter reads GET /v1/timers' filters from q: an empty value is
// no filter. Errors are invalid_argument, naming the parameter.
func parseTimerFilter(q url.Values) (hourglass.TimerFilter, error) {
	var f hourglass.TimerFilter
	if q.Get("status") != "" { // empty: every status, as for orders
		f.Status = hourglass.TimerStatus(q.Get("status"))
		if !f.Status.Valid() {
			return f, hourglass.Errorf(hourglass.CodeInvalidArgument, "status: must be scheduled, fired or cancelled, got %q", q.Get("status"))
		}
	}
	if v := q.Get("prefix"); v != "" {
		if err := hourglass.ValidateTimerKey(v); err != nil {
			return f, hourglass.Errorf(hourglass.CodeInvalidArgument, "prefix: must be the start of a timer key, %s", strings.TrimPrefix(hourglass.ErrorMessage(err), "key: "))
		}
		f.Prefix = v
	}
	var err error
	if f.FireFrom, err = parseQueryTime(q, "fire_after"); err != nil {
		return f, err
	}
	if f.FireBefore, err = parseQueryTime(q, "fire_before"); err != nil {
		return f, err
	}
	return f, nil
}

func (s *Server) listTimers(r *http.Request, _ []byte) (int, any, error) {
	q := r.URL.Query()
	known := []string{"status", "prefix", "fire_after", "fire_before", "limit", "after"}
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
	filter, err := parseTimerFilter(q)
	if err != nil {
		return 0, nil, err
	}
	filter.Limit = f.Limit
	f = filter
	var cur timerCursor
	if f.ByFireAt() {
		if cur, err = parseTimerCursor(q); err != nil {
			return 0, nil, err
		}
	} else if q.Has("after") {
		cur.key = q.Get("after")
		if err := hourglass.ValidateTimerKey(cur.key); err != nil {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "after: must be a timer key, %s", strings.TrimPrefix(hourglass.ErrorMessage(err), "key: "))
		}
	}
	// A timer's payload may be MaxTimerPayload bytes: timerBatch at a
	// time, a page of 1,000 is never all in memory, and a full page reads
	// at most one batch past MaxPageBytes.
	page := newPage(r, "timers")
	next, err := fillPage(page, f.Limit, timerBatch, cur,
		func(after timerCursor, n int) ([]hourglass.Timer, error) {
			f.After, f.AfterFireAt, f.AfterID, f.Limit = after.key, after.at, after.id, n
			return s.cfg.Timers.Timers(r.Context(), f)
		},
		func(t hourglass.Timer) any { return timerJSON(t) },
		func(t hourglass.Timer) timerCursor {
			if f.ByFireAt() {
				return timerCursor{at: t.FireAt, id: t.ID}
			}
			return timerCursor{key: t.Key}
		})
	if err != nil {
		return 0, nil, err
	}
	var out encodedJSON
	switch {
	case next == nil:
		out, err = page.finish(nil)
	case f.ByFireAt():
		out, err = page.finish("fire_at:" + strconv.FormatInt(hourglass.UnixMilli(next.at), 10) + ":" + strconv.FormatInt(next.id, 10))
	default:
		out, err = page.finish(next.key)
	}
	return http.StatusOK, out, err
}

// timerCursor is where a page of timers starts: after the key, or, in a
// list by fire time, after the timer id that fires at at.
type timerCursor struct {
	key string
	at  time.Time
	id  int64
}

// parseTimerCursor reads after for a list by fire time: the next of the
// previous page of that list, "fire_at:<unix ms>:<id>". Absent or empty,
// the list starts at its beginning. Errors are invalid_argument, naming
// after.
func parseTimerCursor(q url.Values) (timerCursor, error) {
	v := q.Get("after")
	if v == "" {
		return timerCursor{}, nil
	}
	rest, ok := strings.CutPrefix(v, "fire_at:")
	msText, idText, ok2 := strings.Cut(rest, ":")
	ms, err1 := strconv.ParseInt(msText, 10, 64)
	id, err2 := strconv.ParseInt(idText, 10, 64)
	if !ok || !ok2 || err1 != nil || err2 != nil || ms < 0 || id < 1 {
		return timerCursor{}, hourglass.Errorf(hourglass.CodeInvalidArgument,
			"after: a list with fire_after or fire_before is ordered by fire time; pass the next of its previous page (fire_at:<ms>:<id>), got %q", v)
	}
	return timerCursor{at: hourglass.FromUnixMilli(ms), id: id}, nil
}
