package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// TimeFormat is the API's time format: RFC 3339, UTC, exactly three
// fractional digits.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// MaxBodyBytes is the largest request body accepted (413 above it).
const MaxBodyBytes = 1 << 20

func formatTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(TimeFormat)
	return &s
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ProductJSON is the wire form of a product.
type ProductJSON struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Category  string `json:"category"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
}

func productJSON(p hourglass.Product) ProductJSON {
	return ProductJSON{SKU: p.SKU, Name: p.Name, Category: p.Category, Available: p.Available, Reserved: p.Reserved, Sold: p.Sold}
}

// ItemJSON is the wire form of an order item.
type ItemJSON struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// OrderJSON is the wire form of an order; unset fields are null.
type OrderJSON struct {
	ID          int64      `json:"id"`
	UserID      string     `json:"user_id"`
	Status      string     `json:"status"`
	Items       []ItemJSON `json:"items"`
	CreatedAt   string     `json:"created_at"`
	Deadline    string     `json:"deadline"`
	PaidAt      *string    `json:"paid_at"`
	ClosedAt    *string    `json:"closed_at"`
	CloseReason *string    `json:"close_reason"`
	PaymentID   *string    `json:"payment_id"`
}

func orderJSON(o hourglass.Order) OrderJSON {
	items := make([]ItemJSON, len(o.Items))
	for i, it := range o.Items {
		items[i] = ItemJSON{SKU: it.SKU, Quantity: it.Quantity}
	}
	return OrderJSON{
		ID:          o.ID,
		UserID:      o.UserID,
		Status:      string(o.Status),
		Items:       items,
		CreatedAt:   *formatTime(o.CreatedAt),
		Deadline:    *formatTime(o.Deadline),
		PaidAt:      formatTime(o.PaidAt),
		ClosedAt:    formatTime(o.ClosedAt),
		CloseReason: optString(o.CloseReason),
		PaymentID:   optString(o.PaymentID),
	}
}

// OrderListJSON is the response of GET /v1/orders. Next is the cursor to pass
// as after= for the next page, null on the last page.
type OrderListJSON struct {
	Orders []OrderJSON `json:"orders"`
	Next   *int64      `json:"next"`
}

// PolicyJSON is the wire form of the timeout policy.
type PolicyJSON struct {
	DefaultTimeoutMs int64            `json:"default_timeout_ms"`
	Categories       map[string]int64 `json:"categories"`
	// RemindBeforeMs and RemindBeforeCategories are the reminder leads
	// (order.expiring): the default and a category's; 0 is none.
	RemindBeforeMs         int64            `json:"remind_before_ms"`
	RemindBeforeCategories map[string]int64 `json:"remind_before_categories"`
}

// decodeJSON strictly decodes one JSON object from body into v: unknown
// fields, wrong types, trailing data and a body that is not an object are
// invalid_argument errors; an empty body is one too unless allowEmpty.
func decodeJSON(body []byte, v any, allowEmpty bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "request body is empty; a JSON object is required")
	}
	if t := bytes.TrimSpace(body); t[0] != '{' {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "request body must be a JSON object")
	}
	if err := checkStrict(body, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "request body has data after the JSON object")
	}
	return nil
}

func jsonError(err error) error {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "malformed JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: expected %s, got JSON %s", field, typ.Type, typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "malformed JSON: unexpected end of body")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return hourglass.Errorf(hourglass.CodeInvalidArgument, "invalid JSON: %s", err.Error())
}

type createOrderRequest struct {
	UserID *string `json:"user_id"`
	Items  []*struct {
		SKU      *string `json:"sku"`
		Quantity *int64  `json:"quantity"`
	} `json:"items"`
	TimeoutMs      *int64 `json:"timeout_ms"`
	RemindBeforeMs *int64 `json:"remind_before_ms"`
}

// DecodeCreateOrder parses and validates a POST /v1/orders body. It returns
// the store parameters (without idempotency key) and a hash of the request's
// meaning, used to recognise a repeat of the same request. Every error is an
// invalid_argument *hourglass.Error.
func DecodeCreateOrder(body []byte) (hourglass.CreateOrderParams, error) {
	return decodeCreateOrder(body, true)
}

// decodeCreateOrder is DecodeCreateOrder, with the request's hash only when
// hash is set: the store compares it for an idempotency key alone, so a
// create without one skips it.
func decodeCreateOrder(body []byte, hash bool) (hourglass.CreateOrderParams, error) {
	if o, ok := createOrderFast(body); ok {
		if err := hourglass.ValidateUserID(o.userID); err != nil {
			return hourglass.CreateOrderParams{}, err
		}
		var ms, remind *int64
		if o.hasTimeout {
			ms = &o.timeoutMs
		}
		if o.hasRemind {
			remind = &o.remindMs
		}
		return finishCreateOrder(o.userID, o.items, ms, remind, hash)
	}
	return decodeCreateOrderGeneral(body, hash)
}

// decodeCreateOrderGeneral is DecodeCreateOrder for every body: the strict
// scan, encoding/json, then the checks.
func decodeCreateOrderGeneral(body []byte, hash bool) (hourglass.CreateOrderParams, error) {
	var req createOrderRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return hourglass.CreateOrderParams{}, err
	}
	if req.UserID == nil {
		return hourglass.CreateOrderParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "user_id: required")
	}
	if err := hourglass.ValidateUserID(*req.UserID); err != nil {
		return hourglass.CreateOrderParams{}, err
	}
	if req.Items == nil {
		return hourglass.CreateOrderParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "items: required")
	}
	items := make([]hourglass.Item, len(req.Items))
	for i, it := range req.Items {
		if it == nil {
			return hourglass.CreateOrderParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "items[%d]: must be an object", i)
		}
		if it.SKU == nil {
			return hourglass.CreateOrderParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "items[%d].sku: required", i)
		}
		if it.Quantity == nil {
			return hourglass.CreateOrderParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "items[%d].quantity: required", i)
		}
		items[i] = hourglass.Item{SKU: *it.SKU, Quantity: *it.Quantity}
	}
	return finishCreateOrder(*req.UserID, items, req.TimeoutMs, req.RemindBeforeMs, hash)
}

// finishCreateOrder validates a create's items, timeout and reminder lead
// (the user id was) and returns its parameters, with the hash of its
// meaning when hash is set.
func finishCreateOrder(userID string, items []hourglass.Item, timeoutMs, remindMs *int64, hash bool) (hourglass.CreateOrderParams, error) {
	if err := hourglass.ValidateItems(items); err != nil {
		return hourglass.CreateOrderParams{}, err
	}
	p := hourglass.CreateOrderParams{UserID: userID, Items: items}
	if timeoutMs != nil {
		ms := *timeoutMs
		if ms < hourglass.MinTimeout.Milliseconds() || ms > hourglass.MaxTimeout.Milliseconds() {
			return hourglass.CreateOrderParams{}, hourglass.Errorf(hourglass.CodeInvalidArgument,
				"timeout_ms: must be between %d and %d, got %d", hourglass.MinTimeout.Milliseconds(), hourglass.MaxTimeout.Milliseconds(), ms)
		}
		p.Timeout = time.Duration(ms) * time.Millisecond
	}
	if remindMs != nil {
		lead, err := decodeRemindBefore("remind_before_ms", *remindMs)
		if err != nil {
			return hourglass.CreateOrderParams{}, err
		}
		if p.RemindBefore = lead; lead == 0 {
			p.RemindBefore = hourglass.NoReminder
		}
	}
	if !hash {
		return p, nil
	}
	// The hash covers the request's meaning, not its bytes, so whitespace or
	// key order do not make a retry look like a different request. Its
	// bytes are fmt's "%q\x00%d\x00" then "%s\x00%d\x00" per item, written
	// without fmt.
	var stack [128]byte // one item's fits: the hash's input stays off the heap
	buf := stack[:0]
	buf = strconv.AppendQuote(buf, p.UserID)
	buf = append(buf, 0)
	buf = strconv.AppendInt(buf, p.Timeout.Milliseconds(), 10)
	buf = append(buf, 0)
	for _, it := range p.Items {
		buf = append(buf, it.SKU...)
		buf = append(buf, 0)
		buf = strconv.AppendInt(buf, it.Quantity, 10)
		buf = append(buf, 0)
	}
	if remindMs != nil { // only when given: older hashes stay valid
		buf = append(buf, "remind_before_ms\x00"...)
		buf = strconv.AppendInt(buf, *remindMs, 10)
		buf = append(buf, 0)
	}
	sum := sha256.Sum256(buf)
	p.RequestHash = sum[:]
	return p, nil
}

type putProductRequest struct {
	Name      *string `json:"name"`
	Category  *string `json:"category"`
	Available *int64  `json:"available"`
}

func decodePutProduct(sku string, body []byte) (hourglass.Product, error) {
	var req putProductRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return hourglass.Product{}, err
	}
	if req.Available == nil {
		return hourglass.Product{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "available: required")
	}
	p := hourglass.Product{SKU: sku, Available: *req.Available}
	if req.Name != nil {
		p.Name = *req.Name
	}
	if req.Category != nil {
		p.Category = *req.Category
	}
	return p, hourglass.ValidateProduct(p)
}

type payRequest struct {
	PaymentID *string `json:"payment_id"`
}

type putPolicyRequest struct {
	DefaultTimeoutMs       *int64           `json:"default_timeout_ms"`
	Categories             map[string]int64 `json:"categories"`
	RemindBeforeMs         *int64           `json:"remind_before_ms"`
	RemindBeforeCategories map[string]int64 `json:"remind_before_categories"`
}

func decodePutPolicy(body []byte) (hourglass.Policy, error) {
	var req putPolicyRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return hourglass.Policy{}, err
	}
	if req.DefaultTimeoutMs == nil {
		return hourglass.Policy{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "default_timeout_ms: required")
	}
	p := hourglass.Policy{DefaultTimeout: time.Duration(*req.DefaultTimeoutMs) * time.Millisecond, Categories: map[string]time.Duration{}}
	for c, ms := range req.Categories {
		// Check the range in ms before converting, so a huge value cannot
		// overflow into a valid-looking duration.
		if ms < hourglass.MinTimeout.Milliseconds() || ms > hourglass.MaxTimeout.Milliseconds() {
			return hourglass.Policy{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "categories.%s: must be between %d and %d ms, got %d",
				c, hourglass.MinTimeout.Milliseconds(), hourglass.MaxTimeout.Milliseconds(), ms)
		}
		p.Categories[c] = time.Duration(ms) * time.Millisecond
	}
	if ms := *req.DefaultTimeoutMs; ms < hourglass.MinTimeout.Milliseconds() || ms > hourglass.MaxTimeout.Milliseconds() {
		return hourglass.Policy{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "default_timeout_ms: must be between %d and %d, got %d",
			hourglass.MinTimeout.Milliseconds(), hourglass.MaxTimeout.Milliseconds(), ms)
	}
	if err := decodePolicyReminders(req, &p); err != nil {
		return hourglass.Policy{}, err
	}
	return p, p.Validate()
}

func policyJSON(p hourglass.Policy) PolicyJSON {
	out := PolicyJSON{DefaultTimeoutMs: p.DefaultTimeout.Milliseconds(), Categories: map[string]int64{}}
	for c, d := range p.Categories {
		out.Categories[c] = d.Milliseconds()
	}
	out.RemindBeforeMs, out.RemindBeforeCategories = p.RemindBefore.Milliseconds(), map[string]int64{}
	for c, d := range p.RemindCategories {
		out.RemindBeforeCategories[c] = d.Milliseconds()
	}
	return out
}

// parseID parses an order id from the path.
func parseID(s string) (int64, error) { return parseResourceID("order", s) }

// parsePositive parses a positive integer written canonically: decimal
// digits without sign or leading zero, so one resource has one path ("01"
// and "+1" are refused, not read as 1). ok is false otherwise.
func parsePositive(s string) (n int64, ok bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
