package hourglasstest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// StoreOptions configures a store the suite opens.
type StoreOptions struct {
	Clock  hourglass.Clock // nil: the database's own clock (production); the suite mostly passes a fake *Clock
	Outbox bool            // the store writes each created order's timer to its outbox (hourglass.Outbox)
}

// StoreHarness tells ExerciseStore how to get stores.
type StoreHarness struct {
	// Open returns a new, empty database. The harness closes it in t.Cleanup.
	Open func(t *testing.T, o StoreOptions) hourglass.Database
	// OpenShared, when set (stores meant to be shared by several processes),
	// returns two store values on one new, empty database.
	OpenShared func(t *testing.T, o StoreOptions) (a, b hourglass.Database)
}

// Epoch is the fake clock's starting time in the suites.
var Epoch = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// maxPages bounds every paging loop, so that a cursor that does not advance
// fails the case instead of hanging it.
const maxPages = 1000

// farFuture is later than any time a case reaches, and still a date every
// database can store.
var farFuture = Epoch.AddDate(10, 0, 0)

// ExerciseStore runs the conformance suite every hourglass.Database must
// pass: every method of the interface, by area, each case on a new, empty
// database driven by a fake clock. The cases under Shared need two store
// values on one database and are skipped when h.OpenShared is nil.
//
// A few cases open with a nil Clock (the database's own; one of them, in
// Shared, waits for a real deadline of hourglass.MinTimeout), and one calls
// Close itself before the harness's cleanup does (Close is idempotent). Every case calls
// t.Parallel: Open must give each call its own database.
func ExerciseStore(t *testing.T, h StoreHarness) {
	testenv.RequireDefault(t)
	if h.Open == nil {
		t.Fatal("hourglasstest: StoreHarness.Open is required")
	}
	for _, area := range []struct {
		name string
		run  func(*testing.T, StoreHarness)
	}{
		{"Orders", exerciseOrders},
		{"OrderLists", exerciseOrderLists},
		{"Policy", exercisePolicy},
		{"Outbox", exerciseOutbox},
		{"Events", exerciseEvents},
		{"Webhooks", exerciseWebhooks},
		{"Deliveries", exerciseDeliveries},
		{"AttemptLog", exerciseAttemptLog},
		{"DeadLetterLists", exerciseDeadLetterLists},
		{"Stats", exerciseStats},
		{"Concurrency", exerciseConcurrency},
		{"Edges", exerciseEdges},
		{"Partitions", exercisePartitions},
		{"Cluster", exerciseCluster},
		{"Shared", exerciseShared},
		{"Timers", exerciseTimers},
		{"Retention", exerciseRetention},
		{"Extend", exerciseExtend},
		{"History", exerciseHistory},
		{"Bulk", exerciseBulk},
		{"Reminders", exerciseReminders},
	} {
		t.Run(area.name, func(t *testing.T) {
			t.Parallel()
			area.run(t, h)
		})
	}
}

// storeFixture is what a case works with: a new, empty database and the
// fake clock its writes read.
type storeFixture struct {
	ctx   context.Context
	db    hourglass.Database
	clock *Clock
}

// setupStore opens a new, empty database on a fake clock stopped at Epoch.
func setupStore(t *testing.T, h StoreHarness) storeFixture {
	t.Helper()
	return setupStoreWith(t, h, StoreOptions{})
}

// setupStoreWith is setupStore with options; o.Clock is replaced by the
// fixture's fake clock.
func setupStoreWith(t *testing.T, h StoreHarness, o StoreOptions) storeFixture {
	t.Helper()
	clock := NewClock(Epoch)
	o.Clock = clock
	return storeFixture{ctx: context.Background(), db: h.Open(t, o), clock: clock}
}

// on returns the fixture with another store value on the same database.
func (f storeFixture) on(db hourglass.Database) storeFixture {
	f.db = db
	return f
}

func item(sku string, quantity int64) hourglass.Item {
	return hourglass.Item{SKU: sku, Quantity: quantity}
}

func (f storeFixture) product(t *testing.T, sku, category string, available int64) {
	t.Helper()
	if _, err := f.db.PutProduct(f.ctx, hourglass.Product{SKU: sku, Name: sku, Category: category, Available: available}); err != nil {
		t.Fatalf("PutProduct(%s): %v", sku, err)
	}
}

// stock returns a product's available, reserved and sold units.
func (f storeFixture) stock(t *testing.T, sku string) [3]int64 {
	t.Helper()
	p, err := f.db.Product(f.ctx, sku)
	if err != nil {
		t.Fatalf("Product(%s): %v", sku, err)
	}
	return [3]int64{p.Available, p.Reserved, p.Sold}
}

// create creates an order for user u1; timeout 0 means the policy's.
func (f storeFixture) create(t *testing.T, timeout time.Duration, items ...hourglass.Item) hourglass.Order {
	t.Helper()
	o, created, err := f.db.CreateOrder(f.ctx, hourglass.CreateOrderParams{UserID: "u1", Items: items, Timeout: timeout})
	if err != nil || !created {
		t.Fatalf("CreateOrder(%v, %s): %v (created=%v)", items, timeout, err, created)
	}
	return o
}

func (f storeFixture) order(t *testing.T, id int64) hourglass.Order {
	t.Helper()
	o, err := f.db.Order(f.ctx, id)
	if err != nil {
		t.Fatalf("Order(%d): %v", id, err)
	}
	return o
}

func (f storeFixture) pay(t *testing.T, id int64, paymentID string) hourglass.Order {
	t.Helper()
	o, err := f.db.PayOrder(f.ctx, id, paymentID)
	if err != nil {
		t.Fatalf("PayOrder(%d, %s): %v", id, paymentID, err)
	}
	return o
}

func (f storeFixture) transition(t *testing.T, id int64, a hourglass.Action) hourglass.Order {
	t.Helper()
	o, err := f.db.TransitionOrder(f.ctx, id, a)
	if err != nil {
		t.Fatalf("TransitionOrder(%d, %s): %v", id, a, err)
	}
	return o
}

func (f storeFixture) closeOrders(t *testing.T, ids ...int64) []hourglass.ClosedOrder {
	t.Helper()
	closed, err := f.db.CloseOrders(f.ctx, ids)
	if err != nil {
		t.Fatalf("CloseOrders(%v): %v", ids, err)
	}
	return closed
}

func (f storeFixture) events(t *testing.T, orderID int64) []hourglass.EventRecord {
	t.Helper()
	evs, err := f.db.OrderEvents(f.ctx, orderID)
	if err != nil {
		t.Fatalf("OrderEvents(%d): %v", orderID, err)
	}
	return evs
}

// webhookSecret is a valid secret; webhooks made by the fixture use it
// followed by their URL's path, so each has its own.
const webhookSecret = "0123456789abcdef"

// webhook creates a webhook to https://hooks.example.com/<name> without a limit.
func (f storeFixture) webhook(t *testing.T, name string, events ...hourglass.EventType) hourglass.Webhook {
	t.Helper()
	w, err := f.db.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: "https://hooks.example.com/" + name, Events: events, Secret: webhookSecret + name}, 0)
	if err != nil {
		t.Fatalf("CreateWebhook(%s, %v): %v", name, events, err)
	}
	return w
}

// due returns every pending delivery due at or before until, paging
// through DueDeliveries with a small limit; it checks the order and limit
// of each page.
func (f storeFixture) due(t *testing.T, until time.Time) []hourglass.DeliveryTimer {
	t.Helper()
	const limit = 3
	var (
		out []hourglass.DeliveryTimer
		p   = hourglass.DueDeliveriesParams{Until: until, Limit: limit}
	)
	for n := 0; ; n++ {
		if n > maxPages {
			t.Fatalf("DueDeliveries paging does not end: the cursor does not advance")
		}
		page, err := f.db.DueDeliveries(f.ctx, p)
		if err != nil {
			t.Fatalf("DueDeliveries(%+v): %v", p, err)
		}
		if len(page) > limit {
			t.Fatalf("DueDeliveries(limit %d) returned %d", limit, len(page))
		}
		for _, d := range page {
			if d.At.After(until) {
				t.Fatalf("DueDeliveries(until %v) returned %+v", until, d)
			}
			if n := len(out); n > 0 && !timerBefore(out[n-1].At, out[n-1].ID, d.At, d.ID) {
				t.Fatalf("DueDeliveries not in (at, id) order: %+v then %+v", out[n-1], d)
			}
			out = append(out, d)
		}
		if len(page) < limit {
			return out
		}
		p.After, p.AfterID = page[len(page)-1].At, page[len(page)-1].ID
	}
}

// pendingDeliveries returns every pending delivery, in DueDeliveries order.
func (f storeFixture) pendingDeliveries(t *testing.T) []hourglass.PendingDelivery {
	t.Helper()
	var out []hourglass.PendingDelivery
	for _, tm := range f.due(t, farFuture) {
		d, err := f.db.PendingDelivery(f.ctx, tm.ID)
		if err != nil {
			t.Fatalf("PendingDelivery(%d): %v", tm.ID, err)
		}
		if d.ID != tm.ID || !d.NextAttemptAt.Equal(tm.At) {
			t.Fatalf("PendingDelivery(%d) = id %d at %v; DueDeliveries said %v", tm.ID, d.ID, d.NextAttemptAt, tm.At)
		}
		out = append(out, d)
	}
	f.checkPendingDeliveries(t, out)
	return out
}

// checkPendingDeliveries checks that PendingDeliveries reads what
// PendingDelivery read (want), in batches of up to MaxPendingBatch ids with
// an id that is no delivery mixed in, and refuses a batch too long.
func (f storeFixture) checkPendingDeliveries(t *testing.T, want []hourglass.PendingDelivery) {
	t.Helper()
	byID := make(map[int64]hourglass.PendingDelivery, len(want))
	for _, d := range want {
		byID[d.ID] = d
	}
	seen := 0
	for chunk := range slices.Chunk(want, hourglass.MaxPendingBatch-1) {
		ids := []int64{-1} // no delivery has it: left out
		for _, d := range chunk {
			ids = append(ids, d.ID)
		}
		got, err := f.db.PendingDeliveries(f.ctx, ids)
		if err != nil {
			t.Fatalf("PendingDeliveries(%d ids): %v", len(ids), err)
		}
		if len(got) != len(chunk) {
			t.Fatalf("PendingDeliveries(%d ids, one unknown) returned %d", len(ids), len(got))
		}
		for _, d := range got {
			w, ok := byID[d.ID]
			if !ok || !reflect.DeepEqual(d, w) {
				t.Fatalf("PendingDeliveries returned %+v; PendingDelivery(%d) returned %+v", d, d.ID, w)
			}
			seen++
		}
	}
	if seen != len(want) {
		t.Fatalf("PendingDeliveries returned %d deliveries; want %d", seen, len(want))
	}
	if got, err := f.db.PendingDeliveries(f.ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("PendingDeliveries(none) = %v, %v", got, err)
	}
	if _, err := f.db.PendingDeliveries(f.ctx, make([]int64, hourglass.MaxPendingBatch+1)); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
		t.Fatalf("PendingDeliveries of %d ids: %v; want invalid_argument", hourglass.MaxPendingBatch+1, err)
	}
}

func (f storeFixture) deliveryCounts(t *testing.T) [2]int {
	t.Helper()
	pending, dead, err := f.db.DeliveryCounts(f.ctx)
	if err != nil {
		t.Fatalf("DeliveryCounts: %v", err)
	}
	return [2]int{pending, dead}
}

// timerBefore reports whether (a, aID) sorts strictly before (b, bID).
func timerBefore(a time.Time, aID int64, b time.Time, bID int64) bool {
	return a.Before(b) || (a.Equal(b) && aID < bID)
}

// wantCode fails t unless err is an error with the code.
func wantCode(t *testing.T, err error, code hourglass.Code) {
	t.Helper()
	if got := hourglass.ErrorCode(err); err == nil || got != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
	if !errors.Is(err, &hourglass.Error{Code: code}) {
		t.Fatalf("errors.Is(%v, code %s) is false", err, code)
	}
}

// sameOrder reports whether two orders have the same fields, times to the
// millisecond (as stored).
func sameOrder(a, b hourglass.Order) bool {
	return string(hourglass.MarshalOrder(a)) == string(hourglass.MarshalOrder(b)) && a.Status == b.Status
}

// sameWebhook reports whether two webhooks are equal, their event types
// compared as sets.
func sameWebhook(a, b hourglass.Webhook) bool {
	ae, be := slices.Clone(a.Events), slices.Clone(b.Events)
	slices.Sort(ae)
	slices.Sort(be)
	return a.ID == b.ID && a.URL == b.URL && a.Secret == b.Secret && a.CreatedAt.Equal(b.CreatedAt) && slices.Equal(ae, be)
}

// ms truncates t to the millisecond, the unit every time is stored in.
func ms(t time.Time) time.Time { return hourglass.FromUnixMilli(hourglass.UnixMilli(t)) }

func ids(orders []hourglass.Order) []int64 {
	var out []int64
	for _, o := range orders {
		out = append(out, o.ID)
	}
	return out
}

func eventTypes(evs []hourglass.EventRecord) []hourglass.EventType {
	var out []hourglass.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// sameTimers reports whether two lists hold the same timers in the same order.
func sameTimers(a, b []hourglass.DueItem) bool {
	return slices.EqualFunc(a, b, func(x, y hourglass.DueItem) bool { return x.ID == y.ID && x.At.Equal(y.At) })
}
