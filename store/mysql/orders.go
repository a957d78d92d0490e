package mysql

import (
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
)

const orderColumns = stored.OrderColumns

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanOrder(sc scanner) (hourglass.Order, error) {
	var r stored.OrderRow
	if err := sc.Scan(r.Dest()...); err != nil {
		return hourglass.Order{}, err
	}
	return r.Order()
}
