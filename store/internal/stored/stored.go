// Package stored is the stored form of what every store keeps as text: an
// order's items and the timeout policy. The three stores write the same
// text, so a database's content means the same whichever store reads it.
package stored

import (
	"encoding/json"
	"fmt"
	"strconv"
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

// DecodeItems reads what EncodeItems wrote.
func DecodeItems(raw string) ([]hourglass.Item, error) {
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

// policyJSON is the stored form of hourglass.Policy, in milliseconds.
type policyJSON struct {
	DefaultTimeoutMs int64            `json:"default_timeout_ms"`
	Categories       map[string]int64 `json:"categories"`
}

// EncodePolicy returns the stored text of p. It cannot fail for a policy
// that passed Validate.
func EncodePolicy(p hourglass.Policy) (string, error) {
	j := policyJSON{DefaultTimeoutMs: p.DefaultTimeout.Milliseconds(), Categories: make(map[string]int64, len(p.Categories))}
	for c, d := range p.Categories {
		j.Categories[c] = d.Milliseconds()
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
