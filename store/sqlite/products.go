package sqlite

import (
	"fmt"

	"zombiezen.com/go/sqlite"
)

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
