package sqlite

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// ViewOrder implements hourglass.OrderViewer: the order as Order.View
// shows it at the store's clock (the one its writer decides pays by), read
// after the row. Errors: not_found, unavailable.
func (s *Store) ViewOrder(ctx context.Context, id int64) (hourglass.Order, error) {
	o, err := s.Order(ctx, id)
	if err != nil {
		return o, err
	}
	return o.View(s.clock.Now()), nil
}

// Now implements hourglass.OrderViewer: the store's clock. It does not
// fail.
func (s *Store) Now(context.Context) (time.Time, error) { return s.clock.Now(), nil }
