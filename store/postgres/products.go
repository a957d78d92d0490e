package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/jackc/pgx/v5"
)

const productColumns = `sku, name, category, available, reserved, sold`

func scanProduct(row pgx.Row) (hourglass.Product, error) {
	var p hourglass.Product
	err := row.Scan(&p.SKU, &p.Name, &p.Category, &p.Available, &p.Reserved, &p.Sold)
	return p, err
}

// PutProduct implements hourglass.Store: one upsert, which takes the
// product's row lock like every stock change. Idempotent.
func (s *Store) PutProduct(ctx context.Context, p hourglass.Product) (hourglass.Product, error) {
	if err := hourglass.ValidateProduct(p); err != nil {
		return hourglass.Product{}, err
	}
	var out hourglass.Product
	err := s.tx(ctx, "put product", func(tx pgx.Tx) error {
		var err error
		out, err = scanProduct(tx.QueryRow(ctx, `INSERT INTO products (sku, name, category, available) VALUES ($1, $2, $3, $4)
ON CONFLICT (sku) DO UPDATE SET name = excluded.name, category = excluded.category, available = excluded.available
RETURNING `+productColumns, p.SKU, p.Name, p.Category, p.Available))
		return err
	})
	return out, err
}

// Product implements hourglass.Store.
func (s *Store) Product(ctx context.Context, sku string) (hourglass.Product, error) {
	p, err := scanProduct(s.pool.QueryRow(ctx, `SELECT `+productColumns+` FROM products WHERE sku = $1`, sku))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, hourglass.Errorf(hourglass.CodeNotFound, "product %q not found", sku)
	}
	return p, s.fail("get product", err)
}

// policyJSON is the stored form of hourglass.Policy, in milliseconds (the
// same as store/sqlite's).
type policyJSON struct {
	DefaultTimeoutMs int64            `json:"default_timeout_ms"`
	Categories       map[string]int64 `json:"categories"`
}

// policyCache keeps the policy decoded from one stored text: every create
// re-reads the stored row inside its transaction (another process may have
// changed it) but decodes it only when it changed. Safe for concurrent use.
type policyCache struct{ p atomic.Pointer[cachedPolicy] }

type cachedPolicy struct {
	raw    string
	policy hourglass.Policy
}

// decode returns the policy stored as raw ("" when none is stored). Its
// result is shared: callers must not modify its Categories.
func (c *policyCache) decode(raw string) (hourglass.Policy, error) {
	if cp := c.p.Load(); cp != nil && cp.raw == raw {
		return cp.policy, nil
	}
	p := hourglass.Policy{DefaultTimeout: hourglass.DefaultTimeout, Categories: map[string]time.Duration{}}
	if raw != "" {
		var j policyJSON
		if err := json.Unmarshal([]byte(raw), &j); err != nil {
			return p, fmt.Errorf("decode stored policy: %w", err)
		}
		p.DefaultTimeout = time.Duration(j.DefaultTimeoutMs) * time.Millisecond
		for cat, ms := range j.Categories {
			p.Categories[cat] = time.Duration(ms) * time.Millisecond
		}
	}
	c.p.Store(&cachedPolicy{raw: raw, policy: p})
	return p, nil
}

// Policy implements hourglass.Store: the policy as stored now, a copy.
func (s *Store) Policy(ctx context.Context) (hourglass.Policy, error) {
	var raw string
	err := s.pool.QueryRow(ctx, policyReadSQL).Scan(&raw)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return hourglass.Policy{}, s.fail("get policy", err)
	}
	p, err := s.policy.decode(raw)
	if err != nil {
		return p, s.fail("get policy", err)
	}
	cats := make(map[string]time.Duration, len(p.Categories))
	for c, d := range p.Categories {
		cats[c] = d
	}
	p.Categories = cats
	return p, nil
}

// PutPolicy implements hourglass.Store: it applies to every create whose
// transaction starts after it committed, in any process. Idempotent.
func (s *Store) PutPolicy(ctx context.Context, p hourglass.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	j := policyJSON{DefaultTimeoutMs: p.DefaultTimeout.Milliseconds(), Categories: map[string]int64{}}
	for c, d := range p.Categories {
		j.Categories[c] = d.Milliseconds()
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("postgres: encode policy: %w", err)
	}
	return s.tx(ctx, "put policy", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO settings (name, value) VALUES ('policy', $1)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`, string(raw))
		return err
	})
}
