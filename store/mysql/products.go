package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// PutProduct implements hourglass.Store: an upsert of name, category and
// available (reserved and sold are kept) and a read of the row as stored,
// in one transaction. It takes only the product's row lock, so it cannot
// deadlock with order writes; it is retried after a lock wait timeout.
func (s *Store) PutProduct(ctx context.Context, p hourglass.Product) (hourglass.Product, error) {
	if err := hourglass.ValidateProduct(p); err != nil {
		return hourglass.Product{}, err
	}
	var out hourglass.Product
	err := s.inTx(ctx, "put product", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO products (sku, name, category, available) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE name = ?, category = ?, available = ?`, p.SKU, p.Name, p.Category, p.Available, p.Name, p.Category, p.Available); err != nil {
			return err
		}
		var err error
		out, err = scanProduct(tx.QueryRowContext(ctx, `SELECT sku, name, category, available, reserved, sold FROM products WHERE sku = ?`, p.SKU))
		return err
	})
	return out, err
}

// Product implements hourglass.Store.
func (s *Store) Product(ctx context.Context, sku string) (hourglass.Product, error) {
	p, err := scanProduct(s.db.QueryRowContext(ctx, `SELECT sku, name, category, available, reserved, sold FROM products WHERE sku = ?`, sku))
	if errors.Is(err, sql.ErrNoRows) {
		return p, plan.ProductNotFound(sku)
	}
	return p, fail(fmt.Sprintf("get product %q", sku), err)
}

func scanProduct(sc scanner) (hourglass.Product, error) {
	var p hourglass.Product
	err := sc.Scan(&p.SKU, &p.Name, &p.Category, &p.Available, &p.Reserved, &p.Sold)
	return p, err
}
