package sqlq

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// Products and the timeout policy, outside the group commit. The stock
// moves of orders and the policy read of each create stay in each store's
// batches.

// productSQL reads a product's row, as product scans it.
const productSQL = `SELECT sku, name, category, available, reserved, sold FROM products WHERE sku = ?`

// product reads the product sku; found is false when there is none.
func (x q) product(ctx context.Context, sku string) (p hourglass.Product, found bool, err error) {
	found, err = x.row(ctx, productSQL, []any{sku}, &p.SKU, &p.Name, &p.Category, &p.Available, &p.Reserved, &p.Sold)
	return p, found, err
}

// PutProduct implements hourglass.Store: an upsert of name, category and
// available (reserved and sold are kept) and a read of the row as stored,
// in one transaction. It takes only the product's row lock, like every
// stock change, so it cannot deadlock with order writes. Idempotent.
// Errors: invalid_argument (hourglass.ValidateProduct), unavailable.
func (s *Store) PutProduct(ctx context.Context, p hourglass.Product) (hourglass.Product, error) {
	if err := hourglass.ValidateProduct(p); err != nil {
		return hourglass.Product{}, err
	}
	query := `INSERT INTO products (sku, name, category, available) VALUES (?, ?, ?, ?)` +
		s.d.Upsert("products", "sku", []string{"name", "category", "available"}, nil)
	var out hourglass.Product
	err := s.write(ctx, "put product", Normal, func(x q) error {
		if _, err := x.exec(ctx, query, p.SKU, p.Name, p.Category, p.Available); err != nil {
			return err
		}
		var err error
		out, _, err = x.product(ctx, p.SKU)
		return err
	})
	return out, err
}

// Product implements hourglass.Store. Errors: not_found
// (plan.ProductNotFound), unavailable.
func (s *Store) Product(ctx context.Context, sku string) (hourglass.Product, error) {
	var out hourglass.Product
	err := s.read(ctx, "get product", func(x q) error {
		p, found, err := x.product(ctx, sku)
		if err == nil && !found {
			err = plan.ProductNotFound(sku)
		}
		out = p
		return err
	})
	return out, err
}

// Policy implements hourglass.Store: the policy as stored now, whichever
// process put it, decoded anew, so the caller may change it.
func (s *Store) Policy(ctx context.Context) (hourglass.Policy, error) {
	var p hourglass.Policy
	err := s.read(ctx, "get policy", func(x q) error {
		var raw string // none stored: the default policy
		if _, err := x.row(ctx, `SELECT value FROM settings WHERE name = 'policy'`, nil, &raw); err != nil {
			return err
		}
		var err error
		p, err = stored.DecodePolicy(raw)
		return err
	})
	return p, err
}

// PutPolicy implements hourglass.Store: one upsert, committed before it
// returns; every create whose transaction starts after that, in any
// process, uses it. Idempotent. Errors: invalid_argument
// (hourglass.Policy.Validate), unavailable.
func (s *Store) PutPolicy(ctx context.Context, p hourglass.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	query := `INSERT INTO settings (name, value) VALUES ('policy', ?)` + s.d.Upsert("settings", "name", []string{"value"}, nil)
	return s.write(ctx, "put policy", Normal, func(x q) error {
		raw, err := stored.EncodePolicy(p)
		if err != nil {
			return err
		}
		_, err = x.exec(ctx, query, raw)
		return err
	})
}
