package hourglasstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
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

// ExerciseStore runs the conformance suite every hourglass.Database must
// pass. Cases that need two store values on one database are skipped when
// h.OpenShared is nil.
func ExerciseStore(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) (context.Context, hourglass.Store, *Clock) {
		t.Helper()
		clock := NewClock(Epoch)
		return context.Background(), h.Open(t, StoreOptions{Clock: clock}), clock
	}
	product := func(t *testing.T, ctx context.Context, s hourglass.Store, sku, category string, available int64) {
		t.Helper()
		if _, err := s.PutProduct(ctx, hourglass.Product{SKU: sku, Name: sku, Category: category, Available: available}); err != nil {
			t.Fatalf("PutProduct(%s): %v", sku, err)
		}
	}
	stock := func(t *testing.T, ctx context.Context, s hourglass.Store, sku string) [3]int64 {
		t.Helper()
		p, err := s.Product(ctx, sku)
		if err != nil {
			t.Fatalf("Product(%s): %v", sku, err)
		}
		return [3]int64{p.Available, p.Reserved, p.Sold}
	}
	create := func(t *testing.T, ctx context.Context, s hourglass.Store, timeout time.Duration, items ...hourglass.Item) hourglass.Order {
		t.Helper()
		o, created, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u1", Items: items, Timeout: timeout})
		if err != nil || !created {
			t.Fatalf("CreateOrder: %v (created=%v)", err, created)
		}
		return o
	}
	wantCode := func(t *testing.T, err error, code hourglass.Code) {
		t.Helper()
		if got := hourglass.ErrorCode(err); err == nil || got != code {
			t.Fatalf("error = %v, want code %s", err, code)
		}
	}

	t.Run("Products", func(t *testing.T) {
		t.Parallel()
		ctx, s, _ := setup(t)
		if _, err := s.Product(ctx, "nope"); !errors.Is(err, hourglass.ErrNotFound) {
			t.Fatalf("Product(unknown) = %v, want not_found", err)
		}
		product(t, ctx, s, "A", "physical", 10)
		create(t, ctx, s, time.Minute, hourglass.Item{SKU: "A", Quantity: 3})
		p, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Name: "renamed", Category: "virtual", Available: 50})
		if err != nil {
			t.Fatal(err)
		}
		want := hourglass.Product{SKU: "A", Name: "renamed", Category: "virtual", Available: 50, Reserved: 3}
		if p != want {
			t.Fatalf("PutProduct kept %+v, want %+v (reserved kept, available set)", p, want)
		}
		if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "B", Available: -1}); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
			t.Fatalf("negative available: %v", err)
		}
	})

	t.Run("CreateReservesAllOrNothing", func(t *testing.T) {
		t.Parallel()
		ctx, s, clock := setup(t)
		product(t, ctx, s, "A", "x", 5)
		product(t, ctx, s, "B", "x", 1)
		o := create(t, ctx, s, 10*time.Second, hourglass.Item{SKU: "A", Quantity: 2}, hourglass.Item{SKU: "B", Quantity: 1})
		if o.Status != hourglass.StatePendingPayment || !o.CreatedAt.Equal(clock.Now()) || !o.Deadline.Equal(clock.Now().Add(10*time.Second)) {
			t.Fatalf("created %+v", o)
		}
		if got := stock(t, ctx, s, "A"); got != [3]int64{3, 2, 0} {
			t.Fatalf("A stock %v", got)
		}
		// B is exhausted: the whole order fails and A keeps its stock.
		_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: 1}}})
		wantCode(t, err, hourglass.CodeInsufficientStock)
		_, _, err = s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 1}, {SKU: "Z", Quantity: 1}}})
		wantCode(t, err, hourglass.CodeNotFound)
		if got := stock(t, ctx, s, "A"); got != [3]int64{3, 2, 0} {
			t.Fatalf("A stock after refused orders %v, want unchanged", got)
		}
		got, err := s.Order(ctx, o.ID)
		if err != nil || got.ID != o.ID || len(got.Items) != 2 || got.Items[1] != (hourglass.Item{SKU: "B", Quantity: 1}) {
			t.Fatalf("Order = %+v, %v", got, err)
		}
		if _, err := s.Order(ctx, o.ID+1000); !errors.Is(err, hourglass.ErrNotFound) {
			t.Fatalf("Order(unknown) = %v", err)
		}
	})

	t.Run("PolicyTimeouts", func(t *testing.T) {
		t.Parallel()
		ctx, s, clock := setup(t)
		p, err := s.Policy(ctx)
		if err != nil || p.DefaultTimeout != hourglass.DefaultTimeout {
			t.Fatalf("initial policy %+v, %v", p, err)
		}
		if err := s.PutPolicy(ctx, hourglass.Policy{DefaultTimeout: 20 * time.Minute,
			Categories: map[string]time.Duration{"virtual": 5 * time.Minute, "physical": 30 * time.Minute}}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutPolicy(ctx, hourglass.Policy{DefaultTimeout: time.Millisecond}); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
			t.Fatalf("PutPolicy(1ms) = %v", err)
		}
		product(t, ctx, s, "V", "virtual", 10)
		product(t, ctx, s, "P", "physical", 10)
		product(t, ctx, s, "N", "books", 10)
		for _, tt := range []struct {
			items   []hourglass.Item
			timeout time.Duration
			want    time.Duration
		}{
			{[]hourglass.Item{{SKU: "P", Quantity: 1}}, 0, 30 * time.Minute},
			{[]hourglass.Item{{SKU: "P", Quantity: 1}, {SKU: "V", Quantity: 1}}, 0, 5 * time.Minute},
			{[]hourglass.Item{{SKU: "N", Quantity: 1}}, 0, 20 * time.Minute},
			{[]hourglass.Item{{SKU: "V", Quantity: 1}}, 90 * time.Second, 90 * time.Second},
		} {
			o := create(t, ctx, s, tt.timeout, tt.items...)
			if got := o.Deadline.Sub(clock.Now()); got != tt.want {
				t.Errorf("items %v timeout %s: deadline in %s, want %s", tt.items, tt.timeout, got, tt.want)
			}
		}
	})

	t.Run("Idempotency", func(t *testing.T) {
		t.Parallel()
		ctx, s, _ := setup(t)
		product(t, ctx, s, "A", "x", 10)
		params := hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 2}}, IdempotencyKey: "k1", RequestHash: []byte("h1")}
		first, created, err := s.CreateOrder(ctx, params)
		if err != nil || !created {
			t.Fatal(err)
		}
		again, created, err := s.CreateOrder(ctx, params)
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("repeat: %+v created=%v err=%v; want the first order", again, created, err)
		}
		params.RequestHash = []byte("h2")
		_, _, err = s.CreateOrder(ctx, params)
		wantCode(t, err, hourglass.CodeIdempotencyKeyReused)
		if got := stock(t, ctx, s, "A"); got != [3]int64{8, 2, 0} {
			t.Fatalf("stock %v, want reserved once", got)
		}
	})

	t.Run("PayAtTheBoundary", func(t *testing.T) {
		t.Parallel()
		ctx, s, clock := setup(t)
		product(t, ctx, s, "A", "x", 10)
		early := create(t, ctx, s, time.Second, hourglass.Item{SKU: "A", Quantity: 1})
		late := create(t, ctx, s, time.Second, hourglass.Item{SKU: "A", Quantity: 1})
		clock.Set(early.Deadline.Add(-time.Millisecond))
		paid, err := s.PayOrder(ctx, early.ID, "pay-1")
		if err != nil || paid.Status != hourglass.StatePaid || paid.PaymentID != "pay-1" || !paid.PaidAt.Equal(clock.Now()) {
			t.Fatalf("pay 1ms before the deadline: %+v, %v", paid, err)
		}
		clock.Set(late.Deadline) // exactly at the deadline: not payable
		_, err = s.PayOrder(ctx, late.ID, "pay-2")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		again, err := s.PayOrder(ctx, early.ID, "pay-1")
		if err != nil || again.Status != hourglass.StatePaid {
			t.Fatalf("repeat payment with the same id: %+v, %v", again, err)
		}
		_, err = s.PayOrder(ctx, early.ID, "pay-other")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		_, err = s.PayOrder(ctx, 999999, "p")
		wantCode(t, err, hourglass.CodeNotFound)
		if got := stock(t, ctx, s, "A"); got != [3]int64{8, 1, 1} {
			t.Fatalf("stock %v, want 8 available, 1 reserved (late, unclosed), 1 sold", got)
		}
	})

	t.Run("CloseIsIdempotent", func(t *testing.T) {
		t.Parallel()
		ctx, s, clock := setup(t)
		product(t, ctx, s, "A", "x", 10)
		a := create(t, ctx, s, time.Second, hourglass.Item{SKU: "A", Quantity: 2})
		b := create(t, ctx, s, time.Second, hourglass.Item{SKU: "A", Quantity: 3})
		c := create(t, ctx, s, 5*time.Second, hourglass.Item{SKU: "A", Quantity: 1})
		if _, err := s.PayOrder(ctx, b.ID, "p"); err != nil {
			t.Fatal(err)
		}
		closed, err := s.CloseOrders(ctx, []int64{a.ID, b.ID, c.ID})
		if err != nil || len(closed) != 0 {
			t.Fatalf("close before any deadline: %v, %v; want nothing closed", closed, err)
		}
		clock.Set(a.Deadline.Add(3 * time.Millisecond))
		closed, err = s.CloseOrders(ctx, []int64{a.ID, b.ID, c.ID, 424242})
		if err != nil || len(closed) != 1 || closed[0].OrderID != a.ID || !closed[0].ClosedAt.Equal(clock.Now()) || !closed[0].Deadline.Equal(a.Deadline) {
			t.Fatalf("close = %+v, %v; want only order %d, closed now", closed, err, a.ID)
		}
		for range 3 {
			closed, err = s.CloseOrders(ctx, []int64{a.ID, a.ID})
			if err != nil || len(closed) != 0 {
				t.Fatalf("repeat close = %v, %v; want no-op", closed, err)
			}
		}
		if got := stock(t, ctx, s, "A"); got != [3]int64{6, 1, 3} {
			t.Fatalf("stock %v, want released exactly once", got)
		}
		o, err := s.Order(ctx, a.ID)
		if err != nil || o.Status != hourglass.StateClosed || o.CloseReason != hourglass.CloseReasonTimeout || !o.ClosedAt.Equal(clock.Now()) {
			t.Fatalf("closed order %+v, %v", o, err)
		}
		_, err = s.PayOrder(ctx, a.ID, "p")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
	})

	t.Run("Transitions", func(t *testing.T) {
		t.Parallel()
		ctx, s, clock := setup(t)
		product(t, ctx, s, "A", "x", 10)
		o := create(t, ctx, s, time.Minute, hourglass.Item{SKU: "A", Quantity: 2})
		for _, a := range []hourglass.Action{hourglass.ActionShip, hourglass.ActionComplete} {
			_, err := s.TransitionOrder(ctx, o.ID, a)
			wantCode(t, err, hourglass.CodeInvalidTransition)
		}
		if _, err := s.PayOrder(ctx, o.ID, "p"); err != nil {
			t.Fatal(err)
		}
		_, err := s.TransitionOrder(ctx, o.ID, hourglass.ActionCancel)
		wantCode(t, err, hourglass.CodeInvalidTransition)
		for _, step := range []struct {
			a    hourglass.Action
			want hourglass.State
		}{{hourglass.ActionShip, hourglass.StateShipped}, {hourglass.ActionComplete, hourglass.StateCompleted}} {
			got, err := s.TransitionOrder(ctx, o.ID, step.a)
			if err != nil || got.Status != step.want {
				t.Fatalf("%s: %+v, %v", step.a, got, err)
			}
			_, err = s.TransitionOrder(ctx, o.ID, step.a)
			wantCode(t, err, hourglass.CodeInvalidTransition)
		}
		c := create(t, ctx, s, time.Minute, hourglass.Item{SKU: "A", Quantity: 3})
		got, err := s.TransitionOrder(ctx, c.ID, hourglass.ActionCancel)
		if err != nil || got.Status != hourglass.StateCancelled {
			t.Fatalf("cancel: %+v, %v", got, err)
		}
		_, err = s.PayOrder(ctx, c.ID, "p")
		wantCode(t, err, hourglass.CodeOrderNotPayable)
		late := create(t, ctx, s, time.Minute, hourglass.Item{SKU: "A", Quantity: 1})
		clock.Set(late.Deadline)
		_, err = s.TransitionOrder(ctx, late.ID, hourglass.ActionCancel)
		wantCode(t, err, hourglass.CodeInvalidTransition)
		_, err = s.TransitionOrder(ctx, 999999, hourglass.ActionShip)
		wantCode(t, err, hourglass.CodeNotFound)
		if got := stock(t, ctx, s, "A"); got != [3]int64{7, 1, 2} {
			t.Fatalf("stock %v", got)
		}
	})

	t.Run("PendingDuePages", func(t *testing.T) {
		t.Parallel()
		ctx, s, clock := setup(t)
		product(t, ctx, s, "A", "x", 1000)
		var want []int64
		for i := range 25 {
			// Deadlines repeat every 5 orders, so paging must break ties by id.
			o := create(t, ctx, s, time.Duration(1+i%5)*time.Second, hourglass.Item{SKU: "A", Quantity: 1})
			if i%7 == 3 {
				if _, err := s.PayOrder(ctx, o.ID, "p"); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want = append(want, o.ID)
		}
		until := clock.Now().Add(4 * time.Second) // excludes the 5 s ones
		var got []hourglass.Timer
		after, afterID := time.UnixMilli(0), int64(0)
		for {
			page, err := s.PendingDue(ctx, hourglass.PendingDueParams{After: after, AfterID: afterID, Until: until, Limit: 4})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page...)
			if len(page) < 4 {
				break
			}
			after, afterID = page[len(page)-1].Deadline, page[len(page)-1].OrderID
		}
		for i := 1; i < len(got); i++ {
			prev, cur := got[i-1], got[i]
			if cur.Deadline.Before(prev.Deadline) || (cur.Deadline.Equal(prev.Deadline) && cur.OrderID <= prev.OrderID) {
				t.Fatalf("not ordered by (deadline, id) at %d: %+v then %+v", i, prev, cur)
			}
			if cur.Deadline.After(until) {
				t.Fatalf("timer %+v past until %v", cur, until)
			}
		}
		wantN := 0
		for _, id := range want {
			o, _ := s.Order(ctx, id)
			if !o.Deadline.After(until) {
				wantN++
			}
		}
		if len(got) != wantN {
			t.Fatalf("paged %d timers, want %d", len(got), wantN)
		}
	})

	t.Run("ListOrders", func(t *testing.T) {
		t.Parallel()
		ctx, s, clock := setup(t)
		product(t, ctx, s, "A", "x", 100)
		short := create(t, ctx, s, time.Second, hourglass.Item{SKU: "A", Quantity: 1})
		long := create(t, ctx, s, time.Hour, hourglass.Item{SKU: "A", Quantity: 1})
		paid := create(t, ctx, s, time.Hour, hourglass.Item{SKU: "A", Quantity: 1})
		if _, err := s.PayOrder(ctx, paid.ID, "p"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Second) // short is past its deadline, not yet closed
		for _, tt := range []struct {
			status hourglass.State
			want   []int64
		}{
			{"", []int64{short.ID, long.ID, paid.ID}},
			{hourglass.StatePendingPayment, []int64{long.ID}},
			{hourglass.StateClosed, []int64{short.ID}},
			{hourglass.StatePaid, []int64{paid.ID}},
			{hourglass.StateCancelled, nil},
		} {
			got, err := s.ListOrders(ctx, hourglass.OrderFilter{Status: tt.status, Limit: 10, Now: clock.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids(got)) != fmt.Sprint(tt.want) {
				t.Errorf("status %q: %v, want %v", tt.status, ids(got), tt.want)
			}
		}
		page, err := s.ListOrders(ctx, hourglass.OrderFilter{After: short.ID, Limit: 1, Now: clock.Now()})
		if err != nil || len(page) != 1 || page[0].ID != long.ID {
			t.Fatalf("after/limit page = %v, %v", ids(page), err)
		}
	})

	t.Run("ConcurrentCreatesNeverOversell", func(t *testing.T) {
		t.Parallel()
		ctx, s, _ := setup(t)
		product(t, ctx, s, "A", "x", 100)
		var (
			wg               sync.WaitGroup
			mu               sync.Mutex
			created, refused int
		)
		for g := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 15 {
					_, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint(g, "-", i), Items: []hourglass.Item{{SKU: "A", Quantity: 1}}, Timeout: time.Minute})
					mu.Lock()
					switch {
					case err == nil:
						created++
					case hourglass.ErrorCode(err) == hourglass.CodeInsufficientStock:
						refused++
					default:
						t.Errorf("create: %v", err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if created != 100 || refused != 200 {
			t.Fatalf("created %d refused %d, want exactly 100 and 200", created, refused)
		}
		if got := stock(t, ctx, s, "A"); got != [3]int64{0, 100, 0} {
			t.Fatalf("stock %v", got)
		}
	})
}

func ids(orders []hourglass.Order) []int64 {
	var out []int64
	for _, o := range orders {
		out = append(out, o.ID)
	}
	return out
}
