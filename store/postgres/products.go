package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
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
		return p, plan.ProductNotFound(sku)
	}
	return p, s.fail("get product", err)
}

// Policy implements hourglass.Store: the policy as stored now, a copy.
func (s *Store) Policy(ctx context.Context) (hourglass.Policy, error) {
	var raw string
	err := s.pool.QueryRow(ctx, policyReadSQL).Scan(&raw)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return hourglass.Policy{}, s.fail("get policy", err)
	}
	p, err := s.policy.Decode(raw)
	if err != nil {
		return p, s.fail("get policy", err)
	}
	p.Categories = maps.Clone(p.Categories) // the caller's to change
	return p, nil
}

// PutPolicy implements hourglass.Store: it applies to every create whose
// transaction starts after it committed, in any process. Idempotent.
func (s *Store) PutPolicy(ctx context.Context, p hourglass.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	raw, err := stored.EncodePolicy(p)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return s.tx(ctx, "put policy", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO settings (name, value) VALUES ('policy', $1)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`, string(raw))
		return err
	})
}
