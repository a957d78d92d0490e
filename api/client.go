package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client is a Go client of the v1 API. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// NewClient returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080"). token may be empty; hc nil means
// http.DefaultClient.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: hc}
}

// Error is a non-2xx answer from the server.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("hourglass api: %d %s: %s", e.Status, e.Code, e.Message)
}

// Do sends a request with a JSON body (nil for none) and decodes a 2xx JSON
// answer into out (unless nil). It returns the status code; a non-2xx answer
// is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, header http.Header, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("hourglass api: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, fmt.Errorf("hourglass api: %w", err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("hourglass api: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("hourglass api: read response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var eb errorBody
		if err := json.Unmarshal(raw, &eb); err != nil {
			return resp.StatusCode, &Error{Status: resp.StatusCode, Code: "unknown", Message: string(raw)}
		}
		return resp.StatusCode, &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("hourglass api: decode response: %w", err)
		}
	}
	return resp.StatusCode, nil
}

// PutProduct creates or updates a product.
func (c *Client) PutProduct(ctx context.Context, sku, name, category string, available int64) (ProductJSON, error) {
	var p ProductJSON
	_, err := c.Do(ctx, http.MethodPut, "/v1/products/"+url.PathEscape(sku), nil,
		map[string]any{"name": name, "category": category, "available": available}, &p)
	return p, err
}

// Product returns a product.
func (c *Client) Product(ctx context.Context, sku string) (ProductJSON, error) {
	var p ProductJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/products/"+url.PathEscape(sku), nil, nil, &p)
	return p, err
}

// CreateOrderRequest is the body of POST /v1/orders.
type CreateOrderRequest struct {
	UserID    string     `json:"user_id"`
	Items     []ItemJSON `json:"items"`
	TimeoutMs int64      `json:"timeout_ms,omitempty"`
	// RemindBeforeMs, when set, is the order's own reminder lead (0: none).
	RemindBeforeMs *int64 `json:"remind_before_ms,omitempty"`
}

// CreateOrder creates an order; idempotencyKey may be empty. It returns the
// status (201 created, 200 a repeat of an idempotent create).
func (c *Client) CreateOrder(ctx context.Context, req CreateOrderRequest, idempotencyKey string) (OrderJSON, int, error) {
	var o OrderJSON
	var h http.Header
	if idempotencyKey != "" {
		h = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	status, err := c.Do(ctx, http.MethodPost, "/v1/orders", h, req, &o)
	return o, status, err
}

// Order returns an order.
func (c *Client) Order(ctx context.Context, id int64) (OrderJSON, error) {
	var o OrderJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/orders/"+strconv.FormatInt(id, 10), nil, nil, &o)
	return o, err
}

// ListOrders returns one page of orders; status may be empty, after 0.
func (c *Client) ListOrders(ctx context.Context, status string, limit int, after int64) (OrderListJSON, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	var l OrderListJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/orders?"+q.Encode(), nil, nil, &l)
	return l, err
}

// Pay pays an order.
func (c *Client) Pay(ctx context.Context, id int64, paymentID string) (OrderJSON, error) {
	var o OrderJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/orders/"+strconv.FormatInt(id, 10)+"/pay", nil, map[string]string{"payment_id": paymentID}, &o)
	return o, err
}

// Transition applies "cancel", "ship" or "complete".
func (c *Client) Transition(ctx context.Context, id int64, action string) (OrderJSON, error) {
	var o OrderJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/orders/"+strconv.FormatInt(id, 10)+"/"+action, nil, nil, &o)
	return o, err
}

// Policy returns the timeout policy.
func (c *Client) Policy(ctx context.Context) (PolicyJSON, error) {
	var p PolicyJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/policies", nil, nil, &p)
	return p, err
}

// PutPolicy replaces the timeout policy.
func (c *Client) PutPolicy(ctx context.Context, p PolicyJSON) (PolicyJSON, error) {
	var out PolicyJSON
	_, err := c.Do(ctx, http.MethodPut, "/v1/policies", nil, p, &out)
	return out, err
}

// ErrorCode returns the API error code of err ("" if it is not an *Error).
func ErrorCode(err error) string {
	if e, ok := err.(*Error); ok {
		return e.Code
	}
	return ""
}

// ArmTimerRequest is the body of PUT /v1/timers/{key}: exactly one of
// FireAt (RFC 3339) and DelayMs; Payload a JSON object or nil; WebhookID 0
// for every webhook subscribed to timer.fired.
type ArmTimerRequest struct {
	FireAt    string          `json:"fire_at,omitempty"`
	DelayMs   *int64          `json:"delay_ms,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	WebhookID int64           `json:"webhook_id,omitempty"`
}

// Delay returns d in milliseconds for ArmTimerRequest.DelayMs.
func Delay(d time.Duration) *int64 {
	ms := d.Milliseconds()
	return &ms
}

// ArmTimer arms (creates or re-arms) the timer key. It returns the status:
// 201 created, 200 re-armed or a repeat of the same request.
func (c *Client) ArmTimer(ctx context.Context, key string, req ArmTimerRequest) (TimerJSON, int, error) {
	var t TimerJSON
	status, err := c.Do(ctx, http.MethodPut, timerPath(key), nil, req, &t)
	return t, status, err
}

// timerPath returns the path of the timer key. The keys "." and ".." are
// valid but are dot segments, which HTTP clients and servers remove from a
// path (RFC 3986 section 5.2.4), so they are sent percent-encoded.
func timerPath(key string) string {
	switch key {
	case ".":
		return "/v1/timers/%2E"
	case "..":
		return "/v1/timers/%2E%2E"
	}
	return "/v1/timers/" + url.PathEscape(key)
}

// Timer returns a timer.
func (c *Client) Timer(ctx context.Context, key string) (TimerJSON, error) {
	var t TimerJSON
	_, err := c.Do(ctx, http.MethodGet, timerPath(key), nil, nil, &t)
	return t, err
}

// CancelTimer cancels a timer; a fired one is refused with code
// "timer_fired".
func (c *Client) CancelTimer(ctx context.Context, key string) (TimerJSON, error) {
	var t TimerJSON
	_, err := c.Do(ctx, http.MethodDelete, timerPath(key), nil, nil, &t)
	return t, err
}

// ListTimers returns one page of timers by key; status and after may be
// empty, limit 0 for the default.
func (c *Client) ListTimers(ctx context.Context, status string, limit int, after string) (TimerListJSON, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	var l TimerListJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/timers?"+q.Encode(), nil, nil, &l)
	return l, err
}

// ExtendOrderRequest is the body of POST /v1/orders/{id}/extend: exactly one
// of Deadline (RFC 3339, the new deadline) and ExtendMs (how much later than
// the current deadline).
type ExtendOrderRequest struct {
	Deadline string `json:"deadline,omitempty"`
	ExtendMs int64  `json:"extend_ms,omitempty"`
}

// ExtendOrder moves a pending order's deadline later; the order is refused
// with code "invalid_transition" when it is not pending or its deadline
// passed.
func (c *Client) ExtendOrder(ctx context.Context, id int64, req ExtendOrderRequest) (OrderJSON, error) {
	var o OrderJSON
	_, err := c.Do(ctx, http.MethodPost, "/v1/orders/"+strconv.FormatInt(id, 10)+"/extend", nil, req, &o)
	return o, err
}

// OrderHistory returns an order's whole story (GET /v1/orders/{id}/history).
func (c *Client) OrderHistory(ctx context.Context, id int64) (HistoryJSON, error) {
	var h HistoryJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/orders/"+strconv.FormatInt(id, 10)+"/history", nil, nil, &h)
	return h, err
}

// TimerHistory returns a timer's whole story (GET /v1/timers/{key}/history).
func (c *Client) TimerHistory(ctx context.Context, key string) (HistoryJSON, error) {
	var h HistoryJSON
	_, err := c.Do(ctx, http.MethodGet, timerPath(key)+"/history", nil, nil, &h)
	return h, err
}

// SourceRowHistory returns a source row's whole story (GET
// /v1/sources/{name}/rows/{key}/history).
func (c *Client) SourceRowHistory(ctx context.Context, source string, key int64) (HistoryJSON, error) {
	var h HistoryJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/sources/"+url.PathEscape(source)+"/rows/"+strconv.FormatInt(key, 10)+"/history", nil, nil, &h)
	return h, err
}

// SourceRowQuery is the query of GET /v1/sources/{name}/rows: Status is
// "pending" or "closed"; a zero time is no bound; After is the Next of
// the previous page.
type SourceRowQuery struct {
	Status                        string
	DeadlineAfter, DeadlineBefore time.Time
	Limit                         int
	After                         string
}

// SourceRows returns one page of a source's rows.
func (c *Client) SourceRows(ctx context.Context, source string, q SourceRowQuery) (SourceRowListJSON, error) {
	v := url.Values{"status": {q.Status}}
	if !q.DeadlineAfter.IsZero() {
		v.Set("deadline_after", q.DeadlineAfter.UTC().Format(time.RFC3339Nano))
	}
	if !q.DeadlineBefore.IsZero() {
		v.Set("deadline_before", q.DeadlineBefore.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	var out SourceRowListJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/sources/"+url.PathEscape(source)+"/rows?"+v.Encode(), nil, nil, &out)
	return out, err
}
