package benchmark

import (
	"fmt"

	"github.com/hourglass/hourglass"
)

// StockCheck is what CheckInvariant needs per SKU.
type StockCheck struct {
	Initial int64 // available when the run started (nothing reserved or sold)
	Product hourglass.Product
}

// CheckInvariant verifies, at the end of a run in which every order reached
// a final or paid state: per SKU available+reserved+sold equals the
// initial stock; reserved equals the units of orders still pending (none
// once all are settled); sold equals the units of paid orders; and no
// order is both paid and closed. It returns every violation found.
func CheckInvariant(stock map[string]StockCheck, orders []hourglass.Order) []error {
	var errs []error
	pending := map[string]int64{}
	sold := map[string]int64{}
	for _, o := range orders {
		if !o.PaidAt.IsZero() && !o.ClosedAt.IsZero() {
			errs = append(errs, fmt.Errorf("order %d is both paid (%v) and closed (%v)", o.ID, o.PaidAt, o.ClosedAt))
		}
		for _, it := range o.Items {
			switch o.Status {
			case hourglass.StatePendingPayment:
				pending[it.SKU] += it.Quantity
			case hourglass.StatePaid, hourglass.StateShipped, hourglass.StateCompleted:
				sold[it.SKU] += it.Quantity
			}
		}
	}
	for sku, s := range stock {
		p := s.Product
		if total := p.Available + p.Reserved + p.Sold; total != s.Initial {
			errs = append(errs, fmt.Errorf("%s: available+reserved+sold = %d, want %d", sku, total, s.Initial))
		}
		if p.Reserved != pending[sku] {
			errs = append(errs, fmt.Errorf("%s: reserved %d, pending orders hold %d", sku, p.Reserved, pending[sku]))
		}
		if p.Sold != sold[sku] {
			errs = append(errs, fmt.Errorf("%s: sold %d, paid orders hold %d", sku, p.Sold, sold[sku]))
		}
	}
	return errs
}
