package mysql

// DeliveriesCreated implements hourglass.DeliveryStore. It fires after this
// store value's commits that created deliveries. MySQL has no NOTIFY:
// deliveries created by other processes (or other store values) are found
// only by the consumer's polling of DueDeliveries, so that polling is what
// bounds their latency.
func (s *Store) DeliveriesCreated() <-chan struct{} { return s.w.DeliveriesCreated() }
