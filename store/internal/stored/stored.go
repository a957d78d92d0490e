// Package stored is the stored form of what every store keeps as text: an
// order's items and the timeout policy. The three stores write the same
// text, so a database's content means the same whichever store reads it.
package stored

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
)

// EncodeItems writes items as a JSON array of {"sku","quantity"}; SKUs are
// validated to [A-Za-z0-9._-], so they need no escaping.
func EncodeItems(items []hourglass.Item) string {
	b := make([]byte, 0, 32*len(items))
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"sku":"`...)
		b = append(b, it.SKU...)
		b = append(b, `","quantity":`...)
		b = strconv.AppendInt(b, it.Quantity, 10)
		b = append(b, '}')
	}
	return string(append(b, ']'))
}

// DecodeItems reads what EncodeItems wrote: its exact form without
// reflection (a burst of closes decodes every order's items), anything
// else as JSON.
func DecodeItems(raw string) ([]hourglass.Item, error) {
	if items, ok := parseEncodedItems(raw); ok {
		return items, nil
	}
	var rows []struct {
		SKU      string `json:"sku"`
		Quantity int64  `json:"quantity"`
	}
	if err := json.Unmarshal([]byte(raw), &rows); err != nil {
		return nil, fmt.Errorf("decode items: %w", err)
	}
	items := make([]hourglass.Item, len(rows))
	for i, r := range rows {
		items[i] = hourglass.Item{SKU: r.SKU, Quantity: r.Quantity}
	}
	return items, nil
}

// parseEncodedItems parses exactly what EncodeItems writes; ok is false for
// anything else.
func parseEncodedItems(raw string) (items []hourglass.Item, ok bool) {
	const skuKey, qtyKey = `{"sku":"`, `","quantity":`
	rest, ok := strings.CutPrefix(raw, "[")
	for ok && rest != "]" {
		var sku string
		if rest, ok = strings.CutPrefix(rest, skuKey); !ok {
			return nil, false
		}
		if sku, rest, ok = strings.Cut(rest, qtyKey); !ok || strings.ContainsAny(sku, `"\`) {
			return nil, false
		}
		end := strings.IndexAny(rest, ",}")
		if end <= 0 || rest[end] != '}' {
			return nil, false
		}
		qty, err := strconv.ParseInt(rest[:end], 10, 64)
		if err != nil {
			return nil, false
		}
		items = append(items, hourglass.Item{SKU: sku, Quantity: qty})
		rest = rest[end+1:]
		if next, more := strings.CutPrefix(rest, ","); more && next != "]" {
			rest = next
		} else if more || rest != "]" {
			return nil, false
		}
	}
	return items, ok
}

// OrderColumns are an order's columns in every store, in OrderRow.Dest's
// order.
const OrderColumns = `id, user_id, status, items, created_at, deadline, paid_at, closed_at, close_reason, payment_id`

// OrderRow is an order's row as every store keeps it (times in unix ms,
// NULL as nil): the one place a row becomes a hourglass.Order. A store
// scans into Dest or fills the fields from its columns.
type OrderRow struct {
	ID, Created, Deadline int64
	User, Status, Items   string
	Paid, Closed          *int64
	Reason, PaymentID     *string
}

// Dest returns the scan destinations of OrderColumns followed by extra.
func (r *OrderRow) Dest(extra ...any) []any {
	return append([]any{&r.ID, &r.User, &r.Status, &r.Items, &r.Created, &r.Deadline, &r.Paid, &r.Closed, &r.Reason, &r.PaymentID}, extra...)
}

// Order returns the row's order; an error names the order whose items do
// not decode.
func (r *OrderRow) Order() (hourglass.Order, error) {
	o := hourglass.Order{
		ID:        r.ID,
		UserID:    r.User,
		Status:    hourglass.State(r.Status),
		CreatedAt: hourglass.FromUnixMilli(r.Created),
		Deadline:  hourglass.FromUnixMilli(r.Deadline),
	}
	if r.Paid != nil {
		o.PaidAt = hourglass.FromUnixMilli(*r.Paid)
	}
	if r.Closed != nil {
		o.ClosedAt = hourglass.FromUnixMilli(*r.Closed)
	}
	if r.Reason != nil {
		o.CloseReason = *r.Reason
	}
	if r.PaymentID != nil {
		o.PaymentID = *r.PaymentID
	}
	its, err := DecodeItems(r.Items)
	if err != nil {
		return o, fmt.Errorf("order %d: %w", o.ID, err)
	}
	o.Items = its
	return o, nil
}

// policyJSON is the stored form of hourglass.Policy, in milliseconds.
type policyJSON struct {
	DefaultTimeoutMs int64            `json:"default_timeout_ms"`
	Categories       map[string]int64 `json:"categories"`
	RemindBeforeMs   int64            `json:"remind_before_ms,omitempty"`
	RemindCategories map[string]int64 `json:"remind_before_categories,omitempty"`
}

// EncodePolicy returns the stored text of p. It cannot fail for a policy
// that passed Validate.
func EncodePolicy(p hourglass.Policy) (string, error) {
	j := policyJSON{DefaultTimeoutMs: p.DefaultTimeout.Milliseconds(), Categories: make(map[string]int64, len(p.Categories))}
	for c, d := range p.Categories {
		j.Categories[c] = d.Milliseconds()
	}
	j.RemindBeforeMs = p.RemindBefore.Milliseconds()
	for c, d := range p.RemindCategories {
		if j.RemindCategories == nil {
			j.RemindCategories = make(map[string]int64, len(p.RemindCategories))
		}
		j.RemindCategories[c] = d.Milliseconds()
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return "", fmt.Errorf("encode policy: %w", err)
	}
	return string(raw), nil
}

// DecodePolicy reads what EncodePolicy wrote; "" (nothing stored) is the
// default policy.
func DecodePolicy(raw string) (hourglass.Policy, error) {
	p := hourglass.Policy{DefaultTimeout: hourglass.DefaultTimeout, Categories: map[string]time.Duration{}}
	if raw == "" {
		return p, nil
	}
	var j policyJSON
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return p, fmt.Errorf("decode stored policy: %w", err)
	}
	p.DefaultTimeout = time.Duration(j.DefaultTimeoutMs) * time.Millisecond
	for c, ms := range j.Categories {
		p.Categories[c] = time.Duration(ms) * time.Millisecond
	}
	p.RemindBefore = time.Duration(j.RemindBeforeMs) * time.Millisecond
	for c, ms := range j.RemindCategories {
		if p.RemindCategories == nil {
			p.RemindCategories = make(map[string]time.Duration, len(j.RemindCategories))
		}
		p.RemindCategories[c] = time.Duration(ms) * time.Millisecond
	}
	return p, nil
}

// PolicyCache decodes the stored policy text only when it changed: a store
// re-reads the text inside each create's transaction (another store value
// or process may have put a new policy), and this keeps the re-read cheap.
// Its zero value is ready; it is safe for concurrent use.
type PolicyCache struct{ last atomic.Pointer[cachedPolicy] }

type cachedPolicy struct {
	raw    string
	policy hourglass.Policy
}

// Decode returns the policy stored as raw. Its result is shared: callers
// must not modify its Categories (copy them to hand the policy out).
func (c *PolicyCache) Decode(raw string) (hourglass.Policy, error) {
	if cp := c.last.Load(); cp != nil && cp.raw == raw {
		return cp.policy, nil
	}
	p, err := DecodePolicy(raw)
	if err != nil {
		return p, err
	}
	c.last.Store(&cachedPolicy{raw: raw, policy: p})
	return p, nil
}
