package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/bulk"
)

// BulkBackend is what /v1/bulk-actions and POST /v1/timers/batch need: the
// store's bulk writes and the lists a filter pages (a hourglass.Database
// has both).
type BulkBackend interface {
	hourglass.BulkStore
	bulk.Lister
}

// DeadLetterRetries is an optional ability of the WebhookService: told the
// dead letters a bulk action retried, it schedules their deliveries.
type DeadLetterRetries interface {
	Retried(ts []hourglass.DeliveryTimer)
}

// Limits of the bulk routes.
const (
	BulkListLimitDefault = 20
	MaxBulkListLimit     = 100
	// MaxBulkCount is the most items a dry run counts.
	MaxBulkCount = 1_000_000
	// maxBulkIDLen is the longest bulk action id (bulk.NewID's are 24).
	maxBulkIDLen = 32
)

// bulkRoutes returns the bulk routes, or none when no BulkBackend is
// configured.
func (s *Server) bulkRoutes() []route {
	if s.cfg.Bulk == nil {
		return nil
	}
	rs := []route{
		{"POST", "/v1/bulk-actions", s.createBulkAction},
		{"GET", "/v1/bulk-actions", s.listBulkActions},
		{"GET", "/v1/bulk-actions/{id}", s.getBulkAction},
		{"POST", "/v1/bulk-actions/{id}/stop", s.stopBulkAction},
	}
	if s.cfg.Timers != nil {
		rs = append(rs, route{"POST", "/v1/timers/batch", s.timerBatch})
	}
	return rs
}

// BulkActionJSON is a filtered bulk action: POST /v1/bulk-actions' 202,
// GET /v1/bulk-actions/{id}.
type BulkActionJSON struct {
	ID         string  `json:"id"`
	Action     string  `json:"action"`
	State      string  `json:"state"`
	Matched    int64   `json:"matched"`
	Done       int64   `json:"done"`
	Failed     int64   `json:"failed"`
	CreatedAt  string  `json:"created_at"`
	FinishedAt *string `json:"finished_at"`
	Reason     string  `json:"reason"`
	Rate       int     `json:"rate"`
	Error      string  `json:"error,omitempty"`
	// Node is the runner holding the action (its node id, then a random
	// part), null when none does (finished, or its lease ran out).
	Node *string `json:"node"`
}

func bulkActionJSON(a hourglass.BulkAction) BulkActionJSON {
	return BulkActionJSON{ID: a.ID, Action: string(a.Action), State: string(a.State), Matched: a.Matched, Done: a.Done, Failed: a.Failed,
		CreatedAt: a.CreatedAt.UTC().Format(TimeFormat), FinishedAt: formatTime(a.FinishedAt), Reason: a.Reason, Rate: a.Rate, Error: a.Error,
		Node: optString(a.Owner)}
}

// BulkActionListJSON is the body of GET /v1/bulk-actions.
type BulkActionListJSON struct {
	BulkActions []BulkActionJSON `json:"bulk_actions"`
	Next        *string          `json:"next"`
}

// BulkItemJSON is one item's result in a bulk action by ids: its id (a
// number, or a timer's key), whether it changed something, its error if
// it was refused, and what it left (the order, timer or deleted dead
// letter; null for a retry).
type BulkItemJSON struct {
	ID     json.RawMessage `json:"id"`
	Done   bool            `json:"done"`
	Error  *ItemErrorJSON  `json:"error"`
	Result json.RawMessage `json:"result"`
}

// ItemErrorJSON is why one item of a bulk call was refused: the code and
// message its single call would have answered.
type ItemErrorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// BulkIDsJSON is POST /v1/bulk-actions' 200 for ids: each item's result,
// in the order of ids.
type BulkIDsJSON struct {
	Action  string         `json:"action"`
	Done    int            `json:"done"`
	Failed  int            `json:"failed"`
	Results []BulkItemJSON `json:"results"`
}

// BulkCountJSON is POST /v1/bulk-actions' 200 for a dry run: how many
// items the filter selects now (at most MaxBulkCount; more says there are
// more).
type BulkCountJSON struct {
	Action  string `json:"action"`
	Matched int64  `json:"matched"`
	More    bool   `json:"more"`
}

// bulkRequest is the body of POST /v1/bulk-actions.
type bulkRequest struct {
	Action *string                    `json:"action"`
	Reason *string                    `json:"reason"`
	IDs    json.RawMessage            `json:"ids"`
	Filter map[string]json.RawMessage `json:"filter"`
	Extend json.RawMessage            `json:"extend"`
	Rate   *int64                     `json:"rate"`
	DryRun *bool                      `json:"dry_run"`
}

// bulkParsed is a checked POST /v1/bulk-actions.
type bulkParsed struct {
	action hourglass.BulkActionKind
	reason string
	items  []hourglass.BulkItem // by ids
	ids    []json.RawMessage    // each item's id as the response names it
	spec   *bulk.Spec           // by filter
	key    string               // its running key: of the filter as given
	rate   int
	dryRun bool
}

// decodeBulk parses and checks a POST /v1/bulk-actions body at now.
// Errors are invalid_argument, naming the field.
func decodeBulk(body []byte, now time.Time) (bulkParsed, error) {
	var (
		req bulkRequest
		p   bulkParsed
	)
	if err := decodeJSON(body, &req, false); err != nil {
		return p, err
	}
	if req.Action == nil || !hourglass.BulkActionKind(*req.Action).Valid() {
		got := "none"
		if req.Action != nil {
			got = strconv.Quote(*req.Action)
		}
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "action: must be one of %v, got %s", hourglass.BulkActionKinds(), got)
	}
	p.action = hourglass.BulkActionKind(*req.Action)
	if req.Reason == nil || strings.TrimSpace(*req.Reason) == "" {
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "reason: required (why the action is taken, up to %d bytes)", hourglass.MaxBulkReason)
	}
	if len(*req.Reason) > hourglass.MaxBulkReason {
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "reason: at most %d bytes, got %d", hourglass.MaxBulkReason, len(*req.Reason))
	}
	if err := hourglass.CheckText("reason", *req.Reason); err != nil {
		return p, err
	}
	p.reason = *req.Reason
	hasIDs, hasFilter := req.IDs != nil && string(req.IDs) != "null", req.Filter != nil
	switch {
	case hasIDs == hasFilter:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "ids, filter: give exactly one (ids: up to %d items in one transaction; filter: every item it selects, in the background)", hourglass.MaxBulkIDs)
	case hasIDs && (req.Rate != nil || req.DryRun != nil):
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "rate, dry_run: only with a filter")
	}
	var extend *hourglass.ExtendOrderParams
	switch {
	case p.action == hourglass.BulkExtendOrders && req.Extend == nil:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, `extend: required for extend_orders ({"deadline": …} or {"extend_ms": …}, as POST /v1/orders/{id}/extend)`)
	case p.action != hourglass.BulkExtendOrders && req.Extend != nil:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "extend: only for extend_orders")
	case req.Extend != nil:
		e, err := decodeExtend(0, req.Extend)
		if err != nil {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "extend: %s", hourglass.ErrorMessage(err))
		}
		extend = &e
	}
	if hasIDs {
		return p, p.decodeIDs(req.IDs, extend)
	}
	if req.Rate != nil {
		if *req.Rate < 1 || *req.Rate > hourglass.MaxBulkRate {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "rate: items per second, 1 to %d, got %d", hourglass.MaxBulkRate, *req.Rate)
		}
		p.rate = int(*req.Rate)
	}
	p.dryRun = req.DryRun != nil && *req.DryRun
	spec, given, err := decodeBulkFilter(p.action, req.Filter, now)
	if err != nil {
		return p, err
	}
	spec.Extend, given.Extend = extend, extend
	p.spec, p.key = &spec, bulk.RunningKey(p.action, given)
	return p, spec.Check(p.action)
}

// decodeIDs reads ids: timer keys for cancel_timers, else ids, at most
// MaxBulkIDs, each once.
func (p *bulkParsed) decodeIDs(raw json.RawMessage, extend *hourglass.ExtendOrderParams) error {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "ids: must be an array")
	}
	switch {
	case len(list) == 0:
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "ids: must not be empty")
	case len(list) > hourglass.MaxBulkIDs:
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "ids: at most %d in one call, got %d (use a filter for more)", hourglass.MaxBulkIDs, len(list))
	}
	seen := make(map[string]bool, len(list))
	for i, v := range list {
		var it hourglass.BulkItem
		if p.action == hourglass.BulkCancelTimers {
			var key string
			if err := json.Unmarshal(v, &key); err != nil {
				return hourglass.Errorf(hourglass.CodeInvalidArgument, "ids[%d]: must be a timer key (a string)", i)
			}
			if err := hourglass.ValidateTimerKey(key); err != nil {
				return hourglass.Errorf(hourglass.CodeInvalidArgument, "ids[%d]: %s", i, hourglass.ErrorMessage(err))
			}
			it = hourglass.BulkItem{Kind: hourglass.BulkItemCancelTimer, Key: key}
		} else {
			var id int64
			if err := json.Unmarshal(v, &id); err != nil || id < 1 {
				return hourglass.Errorf(hourglass.CodeInvalidArgument, "ids[%d]: must be a positive integer id, got %s", i, truncate(string(v), 40))
			}
			it.ID = id
			switch p.action {
			case hourglass.BulkCancelOrders:
				it.Kind = hourglass.BulkItemCancelOrder
			case hourglass.BulkExtendOrders:
				it.Kind, it.Extend = hourglass.BulkItemExtendOrder, *extend
				it.Extend.ID = id
			case hourglass.BulkRetryDeadLetters:
				it.Kind = hourglass.BulkItemRetryDeadLetter
			case hourglass.BulkDeleteDeadLetters:
				it.Kind = hourglass.BulkItemDeleteDeadLetter
			}
		}
		norm, _ := json.Marshal(it.Key)
		if it.Key == "" {
			norm = []byte(strconv.FormatInt(it.ID, 10))
		}
		if seen[string(norm)] {
			return hourglass.Errorf(hourglass.CodeInvalidArgument, "ids[%d]: %s is listed twice", i, norm)
		}
		seen[string(norm)] = true
		p.items, p.ids = append(p.items, it), append(p.ids, norm)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// decodeBulkFilter reads a filter: the query parameters of the list the
// action acts on, as a JSON object of strings (a number is taken as its
// text), checked by that list's own parsing. What a cancel acts on by
// default is what it can change: scheduled timers, pending orders. A
// retry or deletion of dead letters acts on those that failed before now,
// so a letter that fails again after its retry is not retried again by
// the same action.
// The spec given is the filter before that bound: the same action and
// filter later is the same action while it runs.
func decodeBulkFilter(action hourglass.BulkActionKind, raw map[string]json.RawMessage, now time.Time) (spec, given bulk.Spec, err error) {
	var known []string
	switch action {
	case hourglass.BulkCancelTimers:
		known = timerListParams
	case hourglass.BulkCancelOrders, hourglass.BulkExtendOrders:
		known = orderListParams
	default:
		known = deadLetterListParams
	}
	q := url.Values{}
	for k, v := range raw {
		if !slices.Contains(known, k) {
			return spec, given, hourglass.Errorf(hourglass.CodeInvalidArgument, "filter: unknown field %q for %s (want %s)", k, action, strings.Join(known, ", "))
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			var n json.Number
			if err := json.Unmarshal(v, &n); err != nil {
				return spec, given, hourglass.Errorf(hourglass.CodeInvalidArgument, "filter: %s must be a string", k)
			}
			s = n.String()
		}
		q.Set(k, s)
	}
	wrap := func(err error) error {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "filter: %s", hourglass.ErrorMessage(err))
	}
	switch action {
	case hourglass.BulkCancelTimers:
		f, err := parseTimerFilter(q)
		if err != nil {
			return spec, given, wrap(err)
		}
		if f.Status == "" {
			f.Status = hourglass.TimerScheduled
		}
		spec.Timers = &f
	case hourglass.BulkCancelOrders, hourglass.BulkExtendOrders:
		f, err := parseOrderFilter(q)
		if err != nil {
			return spec, given, wrap(err)
		}
		if f.Status == "" {
			f.Status = hourglass.StatePendingPayment
		}
		spec.Orders = &f
	default:
		f, err := parseDeadLetterFilter(q)
		if err != nil {
			return spec, given, wrap(err)
		}
		given.DeadLetters = &f
		bounded := f
		if bounded.FailedBefore.IsZero() || bounded.FailedBefore.After(now) {
			bounded.FailedBefore = hourglass.FromUnixMilli(hourglass.UnixMilli(now) + 1)
		}
		spec.DeadLetters = &bounded
		return spec, given, nil
	}
	return spec, spec, nil
}

// createBulkAction serves POST /v1/bulk-actions: by ids, 200 with each
// item's result, in one transaction; by filter, 202 with the new action
// (200 with the running one when the same action and filter runs), or a
// dry run's 200 count.
func (s *Server) createBulkAction(r *http.Request, body []byte) (int, any, error) {
	ctx := r.Context()
	p, err := decodeBulk(body, s.clock.Now())
	if err != nil {
		return 0, nil, err
	}
	if p.spec == nil {
		return s.bulkByIDs(ctx, p)
	}
	if p.dryRun {
		n, more, err := bulk.Count(ctx, s.cfg.Bulk, p.action, *p.spec, MaxBulkCount)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, BulkCountJSON{Action: string(p.action), Matched: int64(n), More: more}, nil
	}
	raw, err := json.Marshal(p.spec)
	if err != nil {
		return 0, nil, err
	}
	a, created, err := s.cfg.Bulk.CreateBulkAction(ctx, hourglass.BulkAction{
		ID: bulk.NewID(s.clock.Now()), Action: p.action, Reason: p.reason, Spec: raw,
		RunningKey: p.key, Rate: p.rate,
	})
	if err != nil {
		return 0, nil, err
	}
	if !created {
		return http.StatusOK, bulkActionJSON(a), nil
	}
	s.log.Info("api: bulk action created", "bulk_action", a.ID, "action", a.Action, "reason", a.Reason)
	if s.cfg.BulkWake != nil {
		s.cfg.BulkWake()
	}
	return http.StatusAccepted, bulkActionJSON(a), nil
}

// bulkByIDs applies p's items in one transaction.
func (s *Server) bulkByIDs(ctx context.Context, p bulkParsed) (int, any, error) {
	res, err := s.cfg.Bulk.ApplyBulk(ctx, p.items, nil)
	if err != nil {
		return 0, nil, err
	}
	s.retried(res)
	now := s.clock.Now()
	out := BulkIDsJSON{Action: string(p.action), Results: make([]BulkItemJSON, len(res))}
	for i, x := range res {
		j := BulkItemJSON{ID: p.ids[i], Done: x.Err == nil && x.Changed, Result: json.RawMessage("null")}
		switch {
		case x.Err != nil:
			j.Error = &ItemErrorJSON{Code: string(hourglass.ErrorCode(x.Err)), Message: hourglass.ErrorMessage(x.Err)}
			out.Failed++
		case p.items[i].Kind == hourglass.BulkItemCancelTimer:
			j.Result = timerJSON(x.Timer)
		case p.items[i].Kind == hourglass.BulkItemDeleteDeadLetter:
			j.Result, _ = json.Marshal(deadLetterJSON(x.DeadLetter))
		case p.items[i].Kind == hourglass.BulkItemCancelOrder || p.items[i].Kind == hourglass.BulkItemExtendOrder:
			j.Result, _ = json.Marshal(orderJSON(x.Order.View(now)))
		}
		if j.Done {
			out.Done++
		}
		out.Results[i] = j
	}
	s.log.Info("api: bulk action by ids", "action", p.action, "reason", p.reason, "items", len(res), "done", out.Done, "failed", out.Failed)
	return http.StatusOK, out, nil
}

// retried tells the webhook service of the dead letters res retried.
func (s *Server) retried(res []hourglass.BulkItemResult) {
	var ts []hourglass.DeliveryTimer
	for _, x := range res {
		if x.Err == nil && x.Retried.ID != 0 {
			ts = append(ts, x.Retried)
		}
	}
	if r, ok := s.cfg.Webhooks.(DeadLetterRetries); ok && len(ts) > 0 {
		r.Retried(ts)
	}
}

// checkBulkID refuses an id no bulk action can have.
func checkBulkID(id string) error {
	if id == "" || len(id) > maxBulkIDLen || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_") != "" {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "id: must be a bulk action's id (up to %d letters, digits, - and _), got %q", maxBulkIDLen, truncate(id, 40))
	}
	return nil
}

func (s *Server) getBulkAction(r *http.Request, _ []byte) (int, any, error) {
	id := r.PathValue("id")
	if err := checkBulkID(id); err != nil {
		return 0, nil, err
	}
	a, err := s.cfg.Bulk.BulkAction(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, bulkActionJSON(a), nil
}

// stopBulkAction serves POST /v1/bulk-actions/{id}/stop: 200 with the
// action, stopped (from the stop's commit on no item is done), or as it is
// when it had finished.
func (s *Server) stopBulkAction(r *http.Request, body []byte) (int, any, error) {
	id := r.PathValue("id")
	if err := checkBulkID(id); err != nil {
		return 0, nil, err
	}
	if err := decodeEmpty(body); err != nil {
		return 0, nil, err
	}
	a, err := s.cfg.Bulk.StopBulkAction(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, bulkActionJSON(a), nil
}

// listBulkActions serves GET /v1/bulk-actions?limit=&after=: newest first;
// next is the after of the next page.
func (s *Server) listBulkActions(r *http.Request, _ []byte) (int, any, error) {
	q := r.URL.Query()
	for k := range q {
		if k != "limit" && k != "after" {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "unknown query parameter %q (want limit, after)", k)
		}
	}
	limit := BulkListLimitDefault
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxBulkListLimit {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be an integer from 1 to %d, got %q", MaxBulkListLimit, v)
		}
		limit = n
	}
	after := q.Get("after")
	if q.Has("after") {
		if err := checkBulkID(after); err != nil {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "after: %s", hourglass.ErrorMessage(err))
		}
	}
	as, err := s.cfg.Bulk.BulkActions(r.Context(), after, limit+1)
	if err != nil {
		return 0, nil, err
	}
	out := BulkActionListJSON{BulkActions: []BulkActionJSON{}}
	for i, a := range as {
		if i == limit {
			next := as[i-1].ID
			out.Next = &next
			break
		}
		out.BulkActions = append(out.BulkActions, bulkActionJSON(a))
	}
	return http.StatusOK, out, nil
}

// TimerBatchArm is one arm of POST /v1/timers/batch: a PUT
// /v1/timers/{key}'s body with its key.
type TimerBatchArm struct {
	Key       string          `json:"key"`
	FireAt    *string         `json:"fire_at,omitempty"`
	DelayMs   *int64          `json:"delay_ms,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	WebhookID *int64          `json:"webhook_id,omitempty"`
}

// TimerBatchRequest is the body of POST /v1/timers/batch.
type TimerBatchRequest struct {
	Arm    []TimerBatchArm `json:"arm"`
	Cancel []string        `json:"cancel"`
}

// TimerBatchResultJSON is one item's result of POST /v1/timers/batch.
type TimerBatchResultJSON struct {
	Key     string          `json:"key"`
	Op      string          `json:"op"` // arm or cancel
	Created bool            `json:"created"`
	Error   *ItemErrorJSON  `json:"error"`
	Timer   json.RawMessage `json:"timer"`
}

// TimerBatchJSON is POST /v1/timers/batch's 200: one result per item,
// the arms then the cancels, each in the request's order.
type TimerBatchJSON struct {
	Results []TimerBatchResultJSON `json:"results"`
}

// timerBatch serves POST /v1/timers/batch: every item checked as PUT and
// DELETE /v1/timers/{key} check it (400 for the whole call when one is
// not), a key at most once, then all in one transaction, each refused
// alone.
func (s *Server) timerBatch(r *http.Request, body []byte) (int, any, error) {
	var req TimerBatchRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return 0, nil, err
	}
	n := len(req.Arm) + len(req.Cancel)
	switch {
	case n == 0:
		return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "arm, cancel: give at least one item")
	case n > hourglass.MaxBulkIDs:
		return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "arm, cancel: at most %d items in all, got %d", hourglass.MaxBulkIDs, n)
	}
	now := s.clock.Now()
	items := make([]hourglass.BulkItem, 0, n)
	seen := make(map[string]string, n)
	once := func(key, where string) error {
		if prev, ok := seen[key]; ok {
			return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: key %q is in %s already; a key at most once per call", where, key, prev)
		}
		seen[key] = where
		return nil
	}
	webhooks := map[int64]string{}
	for i, a := range req.Arm {
		where := fmt.Sprintf("arm[%d]", i)
		p, err := armTimerRequest{FireAt: a.FireAt, DelayMs: a.DelayMs, Payload: a.Payload, WebhookID: a.WebhookID}.params(a.Key, now)
		if err != nil {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: %s", where, hourglass.ErrorMessage(err))
		}
		if err := once(a.Key, where); err != nil {
			return 0, nil, err
		}
		if p.WebhookID != 0 {
			webhooks[p.WebhookID] = where
		}
		items = append(items, hourglass.BulkItem{Kind: hourglass.BulkItemArmTimer, Arm: p})
	}
	for i, key := range req.Cancel {
		where := fmt.Sprintf("cancel[%d]", i)
		if err := hourglass.ValidateTimerKey(key); err != nil {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: %s", where, hourglass.ErrorMessage(err))
		}
		if err := once(key, where); err != nil {
			return 0, nil, err
		}
		items = append(items, hourglass.BulkItem{Kind: hourglass.BulkItemCancelTimer, Key: key})
	}
	for id, where := range webhooks {
		if err := s.checkTimerWebhook(r.Context(), id); err != nil {
			return 0, nil, hourglass.Errorf(hourglass.ErrorCode(err), "%s: %s", where, hourglass.ErrorMessage(err))
		}
	}
	limit, _ := s.cfg.Timers.(timerLimit)
	if limit != nil {
		if err := checkTimerRoom(r.Context(), limit, s.cfg.Timers, req.Arm); err != nil {
			return 0, nil, err
		}
	}
	res, err := s.cfg.Bulk.ApplyBulk(r.Context(), items, nil)
	if err != nil {
		return 0, nil, err
	}
	if limit != nil {
		created := 0
		for _, x := range res {
			if x.Err == nil && x.Created {
				created++
			}
		}
		limit.TimersCreated(created)
	}
	out := TimerBatchJSON{Results: make([]TimerBatchResultJSON, len(res))}
	for i, x := range res {
		j := TimerBatchResultJSON{Op: "arm", Key: items[i].Arm.Key, Created: x.Created, Timer: json.RawMessage("null")}
		if items[i].Kind == hourglass.BulkItemCancelTimer {
			j.Op, j.Key = "cancel", items[i].Key
		}
		if x.Err != nil {
			j.Error = &ItemErrorJSON{Code: string(hourglass.ErrorCode(x.Err)), Message: hourglass.ErrorMessage(x.Err)}
		} else {
			j.Timer = timerJSON(x.Timer)
		}
		out.Results[i] = j
	}
	return http.StatusOK, out, nil
}

// timerLimit is the bound on the timers that exist (--timer-max,
// retention.TimerLimit) when the TimerStore keeps one.
type timerLimit interface {
	TimerRoom(ctx context.Context) (room, limit int64)
	TimersCreated(n int)
}

// checkTimerRoom refuses a batch whose arms would create more timers than
// the limit leaves room for (limit_exceeded, as PUT answers), reading which
// keys exist only when the room is short of the arms.
func checkTimerRoom(ctx context.Context, l timerLimit, ts hourglass.TimerStore, arms []TimerBatchArm) error {
	room, max := l.TimerRoom(ctx)
	if int64(len(arms)) <= room {
		return nil
	}
	var creates int64
	for _, a := range arms {
		_, err := ts.Timer(ctx, a.Key)
		switch hourglass.ErrorCode(err) {
		case hourglass.CodeNotFound:
			creates++
		case "":
		default:
			return err
		}
	}
	if creates > room {
		return hourglass.TimerLimitError(max)
	}
	return nil
}

// BulkRequest is a POST /v1/bulk-actions for the client: Action, Reason,
// and IDs or Filter (the list's query parameters); Extend for
// extend_orders; Rate and DryRun with a filter.
type BulkRequest struct {
	Action string            `json:"action"`
	Reason string            `json:"reason"`
	IDs    []any             `json:"ids,omitempty"`
	Filter map[string]string `json:"filter,omitempty"`
	Extend *ExtendRequest    `json:"extend,omitempty"`
	Rate   int               `json:"rate,omitempty"`
	DryRun bool              `json:"dry_run,omitempty"`
}

// ExtendRequest is an extension: exactly one of Deadline (RFC 3339) and
// ExtendMs.
type ExtendRequest struct {
	Deadline string `json:"deadline,omitempty"`
	ExtendMs int64  `json:"extend_ms,omitempty"`
}

// BulkByIDs runs req (with IDs) and returns each item's result.
func (c *Client) BulkByIDs(ctx context.Context, req BulkRequest) (BulkIDsJSON, error) {
	var out BulkIDsJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/bulk-actions", nil, req, &out)
	return out, err
}

// BulkCount asks how many items req's filter selects (a dry run).
func (c *Client) BulkCount(ctx context.Context, req BulkRequest) (BulkCountJSON, error) {
	req.DryRun = true
	var out BulkCountJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/bulk-actions", nil, req, &out)
	return out, err
}

// StartBulkAction starts req (with a filter); created is false when the
// same action and filter ran already and the running one is returned.
func (c *Client) StartBulkAction(ctx context.Context, req BulkRequest) (a BulkActionJSON, created bool, err error) {
	req.DryRun = false
	status, err := c.Do(ctx, http.MethodPost, "/v1/bulk-actions", nil, req, &a)
	return a, status == http.StatusAccepted, err
}

// BulkAction returns a bulk action.
func (c *Client) BulkAction(ctx context.Context, id string) (BulkActionJSON, error) {
	var out BulkActionJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/bulk-actions/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// BulkActions returns a page of bulk actions, newest first, after the
// Next of the previous page ("" for the first).
func (c *Client) BulkActions(ctx context.Context, limit int, after string) (BulkActionListJSON, error) {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		v.Set("after", after)
	}
	var out BulkActionListJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/bulk-actions?"+v.Encode(), nil, nil, &out)
	return out, err
}

// StopBulkAction stops a bulk action.
func (c *Client) StopBulkAction(ctx context.Context, id string) (BulkActionJSON, error) {
	var out BulkActionJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/bulk-actions/"+url.PathEscape(id)+"/stop", nil, nil, &out)
	return out, err
}

// TimerBatch arms and cancels timers in one transaction.
func (c *Client) TimerBatch(ctx context.Context, req TimerBatchRequest) (TimerBatchJSON, error) {
	var out TimerBatchJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/timers/batch", nil, req, &out)
	return out, err
}
