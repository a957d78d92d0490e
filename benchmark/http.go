package benchmark

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
)

// HTTPTarget drives a running hourglass server over its API, black-box.
type HTTPTarget struct {
	client *api.Client
}

// NewHTTPTarget returns a target for the server at baseURL.
func NewHTTPTarget(baseURL, token string) *HTTPTarget {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024
	return &HTTPTarget{client: api.NewClient(baseURL, token, &http.Client{Transport: tr, Timeout: 30 * time.Second})}
}

// Create implements Target.
func (t *HTTPTarget) Create(ctx context.Context, sku string, qty int64, timeout, remindBefore time.Duration) (hourglass.Order, error) {
	req := api.CreateOrderRequest{UserID: "bench", Items: []api.ItemJSON{{SKU: sku, Quantity: qty}}, TimeoutMs: timeout.Milliseconds()}
	if remindBefore != 0 {
		req.RemindBeforeMs = new(remindBefore.Milliseconds())
	}
	o, _, err := t.client.CreateOrder(ctx, req, "")
	if err != nil {
		return hourglass.Order{}, err
	}
	return fromJSON(o)
}

// Expiring implements Target: the order's history (GET
// /v1/orders/{id}/history), its order.expiring events' created_at.
func (t *HTTPTarget) Expiring(ctx context.Context, id int64) ([]time.Time, error) {
	h, err := t.client.OrderHistory(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for _, e := range h.Events {
		if e.Type != string(hourglass.EventOrderExpiring) {
			continue
		}
		at, err := time.Parse(api.TimeFormat, e.CreatedAt)
		if err != nil {
			return nil, fmt.Errorf("order %d: event %s: %w", id, e.ID, err)
		}
		out = append(out, at)
	}
	return out, nil
}

// Pay implements Target.
func (t *HTTPTarget) Pay(ctx context.Context, id int64) (bool, error) {
	_, err := t.client.Pay(ctx, id, fmt.Sprint("pay-", id))
	if api.ErrorCode(err) == string(hourglass.CodeOrderNotPayable) {
		return false, nil
	}
	return err == nil, err
}

// Order implements Target. The API shows an unpaid order past its deadline
// as closed before the close commits; closed_at tells them apart.
func (t *HTTPTarget) Order(ctx context.Context, id int64) (hourglass.Order, error) {
	o, err := t.client.Order(ctx, id)
	if err != nil {
		return hourglass.Order{}, err
	}
	out, err := fromJSON(o)
	if out.Status == hourglass.StateClosed && out.ClosedAt.IsZero() {
		out.Status = hourglass.StatePendingPayment
	}
	return out, err
}

// Product implements Target.
func (t *HTTPTarget) Product(ctx context.Context, sku string) (hourglass.Product, error) {
	p, err := t.client.Product(ctx, sku)
	return hourglass.Product{SKU: p.SKU, Name: p.Name, Category: p.Category, Available: p.Available, Reserved: p.Reserved, Sold: p.Sold}, err
}

// PutProduct implements Target. It keeps an existing product's stock and
// only raises available, so runs against a live server add up.
func (t *HTTPTarget) PutProduct(ctx context.Context, p hourglass.Product) error {
	if cur, err := t.client.Product(ctx, p.SKU); err == nil && cur.Available >= p.Available/2 {
		return nil
	}
	_, err := t.client.PutProduct(ctx, p.SKU, p.Name, p.Category, p.Available)
	return err
}

func fromJSON(o api.OrderJSON) (hourglass.Order, error) {
	parse := func(s *string) (time.Time, error) {
		if s == nil {
			return time.Time{}, nil
		}
		return time.Parse(api.TimeFormat, *s)
	}
	out := hourglass.Order{ID: o.ID, UserID: o.UserID, Status: hourglass.State(o.Status)}
	for _, it := range o.Items {
		out.Items = append(out.Items, hourglass.Item{SKU: it.SKU, Quantity: it.Quantity})
	}
	var err error
	for _, f := range []struct {
		dst *time.Time
		src *string
	}{{&out.CreatedAt, &o.CreatedAt}, {&out.Deadline, &o.Deadline}, {&out.PaidAt, o.PaidAt}, {&out.ClosedAt, o.ClosedAt}} {
		if *f.dst, err = parse(f.src); err != nil {
			return out, fmt.Errorf("order %d: %w", o.ID, err)
		}
	}
	return out, nil
}

// RoundRobin spreads a workload over several targets that share one
// database (the nodes of a cluster): each create, pay and read goes to the
// next target in turn, as a load balancer in front of the nodes would send
// it; PutProduct goes to the first only, the products being shared. It is
// safe for concurrent use when its targets are.
type RoundRobin struct {
	targets []Target
	next    atomic.Uint64
}

// NewRoundRobin returns a Target over targets, which must not be empty.
func NewRoundRobin(targets ...Target) *RoundRobin {
	return &RoundRobin{targets: targets}
}

func (r *RoundRobin) pick() Target {
	return r.targets[(r.next.Add(1)-1)%uint64(len(r.targets))]
}

// Create implements Target.
func (r *RoundRobin) Create(ctx context.Context, sku string, qty int64, timeout, remindBefore time.Duration) (hourglass.Order, error) {
	return r.pick().Create(ctx, sku, qty, timeout, remindBefore)
}

// Expiring implements Target.
func (r *RoundRobin) Expiring(ctx context.Context, id int64) ([]time.Time, error) {
	return r.pick().Expiring(ctx, id)
}

// Pay implements Target.
func (r *RoundRobin) Pay(ctx context.Context, id int64) (bool, error) { return r.pick().Pay(ctx, id) }

// Order implements Target.
func (r *RoundRobin) Order(ctx context.Context, id int64) (hourglass.Order, error) {
	return r.pick().Order(ctx, id)
}

// Product implements Target.
func (r *RoundRobin) Product(ctx context.Context, sku string) (hourglass.Product, error) {
	return r.pick().Product(ctx, sku)
}

// PutProduct implements Target, on the first target.
func (r *RoundRobin) PutProduct(ctx context.Context, p hourglass.Product) error {
	return r.targets[0].PutProduct(ctx, p)
}
