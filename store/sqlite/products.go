package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"zombiezen.com/go/sqlite"
)

// PutProduct implements hourglass.Store.
func (s *Store) PutProduct(ctx context.Context, p hourglass.Product) (hourglass.Product, error) {
	if err := hourglass.ValidateProduct(p); err != nil {
		return hourglass.Product{}, err
	}
	var out hourglass.Product
	err := s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
		stmt := conn.Prep(`INSERT INTO products (sku, name, category, available) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (sku) DO UPDATE SET name = excluded.name, category = excluded.category, available = excluded.available
RETURNING sku, name, category, available, reserved, sold`)
		stmt.BindText(1, p.SKU)
		stmt.BindText(2, p.Name)
		stmt.BindText(3, p.Category)
		stmt.BindInt64(4, p.Available)
		found, err := step(stmt, func(st *sqlite.Stmt) { out = scanProduct(st) })
		if err != nil {
			return fmt.Errorf("sqlite: put product: %w", err)
		}
		if !found {
			return fmt.Errorf("sqlite: put product %q: no row returned", p.SKU)
		}
		return nil
	})
	return out, err
}

// Product implements hourglass.Store.
func (s *Store) Product(ctx context.Context, sku string) (hourglass.Product, error) {
	var out hourglass.Product
	err := s.read(ctx, func(conn *sqlite.Conn) error {
		stmt := conn.Prep(`SELECT sku, name, category, available, reserved, sold FROM products WHERE sku = ?1`)
		stmt.BindText(1, sku)
		found, err := step(stmt, func(st *sqlite.Stmt) { out = scanProduct(st) })
		if err != nil {
			return fmt.Errorf("sqlite: get product: %w", err)
		}
		if !found {
			return plan.ProductNotFound(sku)
		}
		return nil
	})
	return out, err
}

func scanProduct(st *sqlite.Stmt) hourglass.Product {
	return hourglass.Product{
		SKU:       st.ColumnText(0),
		Name:      st.ColumnText(1),
		Category:  st.ColumnText(2),
		Available: st.ColumnInt64(3),
		Reserved:  st.ColumnInt64(4),
		Sold:      st.ColumnInt64(5),
	}
}

// moveStock moves qty units of sku between two of available/reserved/sold
// inside the writer's transaction. The caller has checked the source has them.
func moveStock(conn *sqlite.Conn, sku string, qty int64, from, to string) error {
	// One constant statement per move (a create runs one per item: no text
	// built each time).
	var query string
	switch [2]string{from, to} {
	case [2]string{"available", "reserved"}:
		query = `UPDATE products SET available = available - ?1, reserved = reserved + ?1 WHERE sku = ?2`
	case [2]string{"reserved", "sold"}:
		query = `UPDATE products SET reserved = reserved - ?1, sold = sold + ?1 WHERE sku = ?2`
	case [2]string{"reserved", "available"}:
		query = `UPDATE products SET reserved = reserved - ?1, available = available + ?1 WHERE sku = ?2`
	default:
		return fmt.Errorf("sqlite: move %d of %q from %s to %s: no such move", qty, sku, from, to)
	}
	stmt := conn.Prep(query)
	stmt.BindInt64(1, qty)
	stmt.BindText(2, sku)
	if _, err := step(stmt, nil); err != nil {
		return fmt.Errorf("sqlite: move %d of %q from %s to %s: %w", qty, sku, from, to, err)
	}
	if conn.Changes() != 1 {
		return fmt.Errorf("sqlite: move %d of %q from %s to %s: product row missing", qty, sku, from, to)
	}
	return nil
}
