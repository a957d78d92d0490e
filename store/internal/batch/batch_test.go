package batch

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// fakeTx is a Tx over rows in memory that records the statements run, in
// order. A statement the test does not expect panics (the nil Tx).
type fakeTx struct {
	Tx
	now      time.Time
	orders   map[int64]hourglass.Order
	stock    plan.Stock
	ran      []string
	nextID   int64
	updated  []hourglass.Order
	events   []hourglass.EventType
	products map[string][3]int64
}

func (f *fakeTx) log(s string) { f.ran = append(f.ran, s) }

func (f *fakeTx) StoredKeys(context.Context, []string) (map[string]plan.StoredKey, error) {
	f.log("StoredKeys")
	return map[string]plan.StoredKey{}, nil
}

func (f *fakeTx) LockOrders(_ context.Context, ids []int64) ([]hourglass.Order, error) {
	f.log("LockOrders")
	if !slices.IsSorted(ids) {
		return nil, errors.New("ids not ascending")
	}
	var out []hourglass.Order
	for _, id := range ids {
		if o, ok := f.orders[id]; ok {
			out = append(out, o)
		}
	}
	return out, nil
}

func (f *fakeTx) LockProducts(_ context.Context, skus []string) (plan.Stock, error) {
	f.log("LockProducts")
	if !slices.IsSorted(skus) {
		return nil, errors.New("skus not sorted")
	}
	out := plan.Stock{}
	for _, sku := range skus {
		if p := f.stock[sku]; p != nil {
			c := *p
			out[sku] = &c
		}
	}
	return out, nil
}

func (f *fakeTx) Snapshot(context.Context) (Snapshot, error) {
	f.log("Snapshot")
	return Snapshot{Now: f.now, Policy: func() (hourglass.Policy, error) { return hourglass.Policy{DefaultTimeout: time.Minute}, nil }}, nil
}

func (f *fakeTx) InsertOrders(_ context.Context, orders []NewOrder, _ time.Time) error {
	f.log("InsertOrders")
	for i := range orders {
		f.nextID++
		orders[i].Order.ID = f.nextID
	}
	return nil
}

func (f *fakeTx) UpdateOrders(_ context.Context, orders []*hourglass.Order) error {
	f.log("UpdateOrders")
	for _, o := range orders {
		f.updated = append(f.updated, *o)
	}
	return nil
}

func (f *fakeTx) UpdateProducts(_ context.Context, stock plan.Stock) error {
	f.log("UpdateProducts")
	f.products = map[string][3]int64{}
	for _, sku := range stock.Changed() {
		f.products[sku] = stock[sku].Delta
	}
	return nil
}

func (f *fakeTx) InsertEvents(_ context.Context, events []*Event, _ time.Time) error {
	f.log("InsertEvents")
	for i, e := range events {
		if e.ID == "" || e.Subject == 0 {
			return errors.New("event without id or subject")
		}
		e.Seq = int64(i + 1)
		f.events = append(f.events, e.Type)
	}
	return nil
}

func (f *fakeTx) Announce(_ context.Context, _ time.Time, due []hourglass.DueItem) error {
	f.log("Announce")
	if len(due) != 1 || due[0].ID != 101 {
		return errors.New("announced something else than the created order")
	}
	return nil
}

// TestRun runs a create, a close of a due order, a pay of a payable one and
// a refused pay as one batch: the rows are locked in one order, every
// decision is the planner's, each changed row is written once, and the
// refusal writes nothing.
func TestRun(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	items := []hourglass.Item{{SKU: "A", Quantity: 2}}
	pending := func(id int64, deadline time.Time) hourglass.Order {
		return hourglass.Order{ID: id, Status: hourglass.StatePendingPayment, Items: items, CreatedAt: now.Add(-time.Hour), Deadline: deadline}
	}
	tx := &fakeTx{now: now, nextID: 100,
		orders: map[int64]hourglass.Order{1: pending(1, now.Add(-time.Second)), 2: pending(2, now.Add(time.Second))},
		stock:  plan.Stock{"A": {Available: 10, Reserved: 4}},
	}
	ops := []*Op{
		{Kind: Create, Create: hourglass.CreateOrderParams{UserID: "u", Items: items}},
		{Kind: Close, IDs: []int64{2, 1}},
		{Kind: Pay, ID: 2, PaymentID: "p"},
		{Kind: Pay, ID: 1, PaymentID: "q"}, // closed by the close before it
	}
	out, err := Run(context.Background(), Config{}, tx, ops)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"LockOrders", "LockProducts", "Snapshot", "InsertOrders", "UpdateOrders", "UpdateProducts", "InsertEvents", "Announce"}; !slices.Equal(tx.ran, want) {
		t.Errorf("statements %v, want %v", tx.ran, want)
	}
	if r := ops[0].Res; r.Err != nil || !r.Created || r.Order.ID != 101 || !r.Order.Deadline.Equal(now.Add(time.Minute)) {
		t.Errorf("create: %+v", r)
	}
	if r := ops[1].Res; r.Err != nil || len(r.Closed) != 1 || r.Closed[0].OrderID != 1 {
		t.Errorf("close: %+v", r)
	}
	if r := ops[2].Res; r.Err != nil || r.Order.Status != hourglass.StatePaid {
		t.Errorf("pay: %+v", r)
	}
	if r := ops[3].Res; hourglass.ErrorCode(r.Err) != hourglass.CodeOrderNotPayable {
		t.Errorf("pay of a closed order: %+v, want order_not_payable", r)
	}
	if len(tx.updated) != 2 || tx.updated[0].Status != hourglass.StateClosed || tx.updated[1].Status != hourglass.StatePaid {
		t.Errorf("updated %+v, want order 1 closed, then 2 paid", tx.updated)
	}
	// Created: 2 reserved; closed: 2 released; paid: 2 sold.
	if d := tx.products["A"]; d != [3]int64{0, -2, 2} {
		t.Errorf("stock delta of A %v, want [0 -2 2]", d)
	}
	if want := []hourglass.EventType{hourglass.EventOrderCreated, hourglass.EventOrderClosed, hourglass.EventOrderPaid}; !slices.Equal(tx.events, want) {
		t.Errorf("events %v, want %v", tx.events, want)
	}
	if out.Deliveries != 0 || out.Deferred {
		t.Errorf("outcome %+v, want none (no subscriptions)", out)
	}
}
