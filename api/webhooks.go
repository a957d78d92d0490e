package api

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/hourglass/hourglass"
)

// WebhookService is what the webhook and dead-letter routes need (package
// webhook's Service). Errors are *hourglass.Error values (invalid_argument,
// not_found) or internal errors.
type WebhookService interface {
	// CreateWebhook validates the parameters, including the allow-list, and
	// stores the webhook.
	CreateWebhook(ctx context.Context, p hourglass.WebhookParams) (hourglass.Webhook, error)
	Webhooks(ctx context.Context, f hourglass.WebhookFilter) ([]hourglass.Webhook, error)
	Webhook(ctx context.Context, id int64) (hourglass.Webhook, error)
	DeleteWebhook(ctx context.Context, id int64) (hourglass.Webhook, error)
	DeadLetters(ctx context.Context, f hourglass.DeadLetterFilter) ([]hourglass.DeadLetter, error)
	// RetryDeadLetter makes a dead letter pending again, due now.
	RetryDeadLetter(ctx context.Context, id int64) error
	DeleteDeadLetter(ctx context.Context, id int64) (hourglass.DeadLetter, error)
}

// Limits of GET /v1/webhooks and GET /v1/deadletters (a page also ends at
// MaxPageBytes).
const (
	WebhookLimitDefault    = 100
	MaxWebhookLimit        = 1000
	DeadLetterLimitDefault = 100
	MaxDeadLetterLimit     = 1000
	// deadLetterBatch is how many dead letters a page reads from the store
	// at once.
	deadLetterBatch = 100
)

// webhookRoutes returns the /v1/webhooks and /v1/deadletters routes, or none
// when no WebhookService is configured.
func (s *Server) webhookRoutes() []route {
	if s.cfg.Webhooks == nil {
		return nil
	}
	return []route{
		{"POST", "/v1/webhooks", s.createWebhook},
		{"GET", "/v1/webhooks", s.listWebhooks},
		{"GET", "/v1/webhooks/{id}", s.getWebhook},
		{"DELETE", "/v1/webhooks/{id}", s.deleteWebhook},
		{"GET", "/v1/deadletters", s.listDeadLetters},
		{"POST", "/v1/deadletters/{id}/retry", s.retryDeadLetter},
		{"DELETE", "/v1/deadletters/{id}", s.deleteDeadLetter},
	}
}

// WebhookJSON is the wire form of a webhook. The secret is never returned,
// not even by the create: the caller chose it.
type WebhookJSON struct {
	ID        int64    `json:"id"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	CreatedAt string   `json:"created_at"`
}

// WebhookListJSON is the response of GET /v1/webhooks: a page, and the
// after= of the next one (null on the last page).
type WebhookListJSON struct {
	Webhooks []WebhookJSON `json:"webhooks"`
	Next     *int64        `json:"next"`
}

// DeadLetterJSON is the wire form of a dead letter.
type DeadLetterJSON struct {
	ID        int64  `json:"id"`
	WebhookID int64  `json:"webhook_id"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	OrderID   int64  `json:"order_id"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error"`
	FailedAt  string `json:"failed_at"`
}

// DeadLetterListJSON is the response of GET /v1/deadletters. Next is the
// cursor to pass as after= for the next page, null on the last page.
type DeadLetterListJSON struct {
	DeadLetters []DeadLetterJSON `json:"deadletters"`
	Next        *int64           `json:"next"`
}

// RetryJSON is the response of POST /v1/deadletters/{id}/retry.
type RetryJSON struct {
	ID     int64  `json:"id"`
	Status string `json:"status"` // "pending": due now
}

// EventJSON is the body of a webhook delivery.
type EventJSON struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt string    `json:"created_at"`
	Order     OrderJSON `json:"order"`
}

func webhookJSON(w hourglass.Webhook) WebhookJSON {
	events := make([]string, len(w.Events))
	for i, e := range w.Events {
		events[i] = string(e)
	}
	return WebhookJSON{ID: w.ID, URL: w.URL, Events: events, CreatedAt: *formatTime(w.CreatedAt)}
}

func deadLetterJSON(d hourglass.DeadLetter) DeadLetterJSON {
	return DeadLetterJSON{
		ID:        d.ID,
		WebhookID: d.WebhookID,
		EventID:   d.EventID,
		EventType: string(d.EventType),
		OrderID:   d.OrderID,
		Attempts:  d.Attempts,
		LastError: d.LastError,
		FailedAt:  *formatTime(d.FailedAt),
	}
}

type createWebhookRequest struct {
	URL    *string   `json:"url"`
	Events []*string `json:"events"`
	Secret *string   `json:"secret"`
}

// decodeCreateWebhook parses a POST /v1/webhooks body; the values are
// checked by the service.
func decodeCreateWebhook(body []byte) (hourglass.WebhookParams, error) {
	var req createWebhookRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return hourglass.WebhookParams{}, err
	}
	if req.URL == nil {
		return hourglass.WebhookParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "url: required")
	}
	if req.Events == nil {
		return hourglass.WebhookParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "events: required (a list of event types, or [\"*\"])")
	}
	if req.Secret == nil {
		return hourglass.WebhookParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "secret: required (%d to %d bytes)", hourglass.MinWebhookSecret, hourglass.MaxWebhookSecret)
	}
	p := hourglass.WebhookParams{URL: *req.URL, Secret: *req.Secret, Events: make([]hourglass.EventType, len(req.Events))}
	for i, e := range req.Events {
		if e == nil {
			return hourglass.WebhookParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "events[%d]: must be a string", i)
		}
		p.Events[i] = hourglass.EventType(*e)
	}
	return p, p.Validate()
}

// parseResourceID parses a positive integer id from the path, written
// canonically (parsePositive).
func parseResourceID(what, s string) (int64, error) {
	id, ok := parsePositive(s)
	if !ok {
		return 0, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s id %q: must be a positive integer, without sign or leading zeros", what, s)
	}
	return id, nil
}

func (s *Server) createWebhook(r *http.Request, body []byte) (int, any, error) {
	p, err := decodeCreateWebhook(body)
	if err != nil {
		return 0, nil, err
	}
	w, err := s.cfg.Webhooks.CreateWebhook(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, webhookJSON(w), nil
}

func (s *Server) listWebhooks(r *http.Request, _ []byte) (int, any, error) {
	pg, err := parsePage(r.URL.Query(), "webhook", WebhookLimitDefault, MaxWebhookLimit)
	if err != nil {
		return 0, nil, err
	}
	page := newPage(r, "webhooks")
	next, err := fillPage(page, pg.limit, pg.limit, pg.after,
		func(after int64, n int) ([]hourglass.Webhook, error) {
			return s.cfg.Webhooks.Webhooks(r.Context(), hourglass.WebhookFilter{After: after, Limit: n})
		},
		func(w hourglass.Webhook) any { return webhookJSON(w) },
		func(w hourglass.Webhook) int64 { return w.ID })
	if err != nil {
		return 0, nil, err
	}
	out, err := page.finish(next)
	return http.StatusOK, out, err
}

func (s *Server) getWebhook(r *http.Request, _ []byte) (int, any, error) {
	id, err := parseResourceID("webhook", r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	w, err := s.cfg.Webhooks.Webhook(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, webhookJSON(w), nil
}

func (s *Server) deleteWebhook(r *http.Request, body []byte) (int, any, error) {
	id, err := parseResourceID("webhook", r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := decodeEmpty(body); err != nil {
		return 0, nil, err
	}
	w, err := s.cfg.Webhooks.DeleteWebhook(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, webhookJSON(w), nil
}

// deadLetterListParams are GET /v1/deadletters' filters, beside limit and
// after.
var deadLetterListParams = []string{"webhook_id", "event_type", "failed_after", "failed_before"}

// parseDeadLetterFilter reads GET /v1/deadletters' filters from q: an
// empty value is no filter. Errors are invalid_argument, naming the
// parameter.
func parseDeadLetterFilter(q url.Values) (hourglass.DeadLetterFilter, error) {
	var (
		f   hourglass.DeadLetterFilter
		err error
	)
	if v := q.Get("webhook_id"); v != "" {
		if f.WebhookID, err = parseResourceID("webhook", v); err != nil {
			return f, hourglass.Errorf(hourglass.CodeInvalidArgument, "webhook_id: %s", hourglass.ErrorMessage(err))
		}
	}
	if v := q.Get("event_type"); v != "" {
		f.EventType = hourglass.EventType(v)
		if !slices.Contains(hourglass.EventTypes(), f.EventType) {
			return f, hourglass.Errorf(hourglass.CodeInvalidArgument, "event_type: must be one of %v, got %q", hourglass.EventTypes(), v)
		}
	}
	if f.FailedFrom, err = parseQueryTime(q, "failed_after"); err != nil {
		return f, err
	}
	if f.FailedBefore, err = parseQueryTime(q, "failed_before"); err != nil {
		return f, err
	}
	return f, nil
}

func (s *Server) listDeadLetters(r *http.Request, _ []byte) (int, any, error) {
	q := r.URL.Query()
	f, err := parseDeadLetterFilter(q)
	if err != nil {
		return 0, nil, err
	}
	var cur orderCursor // the same shape: a time and an id
	if f.ByFailedAt() {
		if cur, err = parseTimeCursor("failed_at", "failed_after or failed_before", q.Get("after")); err != nil {
			return 0, nil, err
		}
		q = maps.Clone(q)
		delete(q, "after")
	}
	pg, err := parsePage(q, "dead letter", DeadLetterLimitDefault, MaxDeadLetterLimit, deadLetterListParams...)
	if err != nil {
		return 0, nil, err
	}
	if !f.ByFailedAt() {
		cur.id = pg.after
	}
	// A dead letter holds its receiver's error text (up to tens of KiB):
	// fetched deadLetterBatch at a time, like timers.
	page := newPage(r, "deadletters")
	next, err := fillPage(page, pg.limit, deadLetterBatch, cur,
		func(after orderCursor, n int) ([]hourglass.DeadLetter, error) {
			f.After, f.AfterFailedAt, f.Limit = after.id, after.at, n
			return s.cfg.Webhooks.DeadLetters(r.Context(), f)
		},
		func(d hourglass.DeadLetter) any { return deadLetterJSON(d) },
		func(d hourglass.DeadLetter) orderCursor { return orderCursor{at: d.FailedAt, id: d.ID} })
	if err != nil {
		return 0, nil, err
	}
	var out encodedJSON
	switch {
	case next == nil:
		out, err = page.finish(nil)
	case f.ByFailedAt():
		out, err = page.finish(timeCursor("failed_at", next.at, next.id))
	default:
		out, err = page.finish(next.id)
	}
	return http.StatusOK, out, err
}

func (s *Server) retryDeadLetter(r *http.Request, body []byte) (int, any, error) {
	id, err := parseResourceID("dead letter", r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := decodeEmpty(body); err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Webhooks.RetryDeadLetter(r.Context(), id); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, RetryJSON{ID: id, Status: "pending"}, nil
}

func (s *Server) deleteDeadLetter(r *http.Request, body []byte) (int, any, error) {
	id, err := parseResourceID("dead letter", r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := decodeEmpty(body); err != nil {
		return 0, nil, err
	}
	d, err := s.cfg.Webhooks.DeleteDeadLetter(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, deadLetterJSON(d), nil
}

// CreateWebhookRequest is the body of POST /v1/webhooks.
type CreateWebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Secret string   `json:"secret"`
}

// CreateWebhook subscribes a URL to event types.
func (c *Client) CreateWebhook(ctx context.Context, req CreateWebhookRequest) (WebhookJSON, error) {
	var w WebhookJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/webhooks", nil, req, &w)
	return w, err
}

// Webhooks lists all the webhooks, following the pages of GET /v1/webhooks.
func (c *Client) Webhooks(ctx context.Context) ([]WebhookJSON, error) {
	var all []WebhookJSON
	path := "/v1/webhooks?limit=" + strconv.Itoa(MaxWebhookLimit)
	for {
		var l WebhookListJSON
		if _, err := c.Do(ctx, http.MethodGet, path, nil, nil, &l); err != nil {
			return all, err
		}
		all = append(all, l.Webhooks...)
		if l.Next == nil {
			return all, nil
		}
		path = "/v1/webhooks?limit=" + strconv.Itoa(MaxWebhookLimit) + "&after=" + strconv.FormatInt(*l.Next, 10)
	}
}

// DeleteWebhook deletes a webhook with its pending deliveries and dead letters.
func (c *Client) DeleteWebhook(ctx context.Context, id int64) (WebhookJSON, error) {
	var w WebhookJSON
	_, err := c.Do(ctx, http.MethodDelete, "/v1/webhooks/"+strconv.FormatInt(id, 10), nil, nil, &w)
	return w, err
}

// DeadLetters returns one page of dead letters; after 0 for the first.
func (c *Client) DeadLetters(ctx context.Context, limit int, after int64) (DeadLetterListJSON, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	var l DeadLetterListJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/deadletters?"+q.Encode(), nil, nil, &l)
	return l, err
}

// RetryDeadLetter sends a dead letter again (due now, attempts reset).
func (c *Client) RetryDeadLetter(ctx context.Context, id int64) error {
	_, err := c.Do(ctx, http.MethodPost, "/v1/deadletters/"+strconv.FormatInt(id, 10)+"/retry", nil, nil, nil)
	return err
}

// DeleteDeadLetter deletes a dead letter.
func (c *Client) DeleteDeadLetter(ctx context.Context, id int64) (DeadLetterJSON, error) {
	var d DeadLetterJSON
	_, err := c.Do(ctx, http.MethodDelete, "/v1/deadletters/"+strconv.FormatInt(id, 10), nil, nil, &d)
	return d, err
}
