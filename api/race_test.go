package api_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestPayRacesClose pays hundreds of orders at their deadline, a few
// milliseconds either side, so that payments race the closer. Whoever wins,
// each order must end either paid (and its pay answered 200) or closed (and
// its pay answered 409 order_not_payable), never both, and stock must be
// conserved: a double close or a close after a payment would show in it.
func TestPayRacesClose(t *testing.T) { onEveryMechanism(t, testPayRacesClose) }

func testPayRacesClose(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	ctx := t.Context()
	const (
		orders  = 300
		initial = 100000
	)
	skus := []string{"race-a", "race-b", "race-c"}
	for _, sku := range skus {
		s.putProduct(t, sku, "", initial)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	type result struct {
		created    api.OrderJSON
		offset     time.Duration // pay sent at deadline + offset
		sent, recv time.Time
		payStatus  int // 200 or 409
		paid       api.OrderJSON
	}
	results := make([]result, orders)
	var wg sync.WaitGroup
	for i := range orders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			req := api.CreateOrderRequest{UserID: fmt.Sprintf("racer-%d", i), TimeoutMs: 1000 + rng.Int64N(501)}
			for _, j := range rng.Perm(len(skus))[:1+rng.IntN(len(skus))] {
				req.Items = append(req.Items, api.ItemJSON{SKU: skus[j], Quantity: 1 + rng.Int64N(5)})
			}
			o, status, err := s.Client.CreateOrder(ctx, req, "")
			if err != nil || status != http.StatusCreated {
				t.Errorf("create %s: status %d, %v", req.UserID, status, err)
				return
			}
			r := &results[i]
			r.created = o
			deadline, err := time.Parse(time.RFC3339Nano, o.Deadline)
			if err != nil {
				t.Errorf("order %d: deadline %q: %v", o.ID, o.Deadline, err)
				return
			}
			// Sleeping to a wall-clock instant is the point here: the pay
			// must land on the deadline.
			r.offset = time.Duration(rng.Int64N(10001)-5000) * time.Microsecond
			testenv.Until(ctx, deadline.Add(r.offset))
			r.sent = time.Now()
			paid, err := s.Client.Pay(ctx, o.ID, fmt.Sprintf("pay-%d", i))
			r.recv = time.Now()
			var apiErr *api.Error
			switch {
			case err == nil:
				r.payStatus, r.paid = http.StatusOK, paid
			case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && apiErr.Code == "order_not_payable":
				r.payStatus = http.StatusConflict
			default:
				t.Errorf("pay order %d: %v; want 200 or 409 order_not_payable", o.ID, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Wait for the closer to commit every unpaid order (closed_at set).
	var final map[int64]api.OrderJSON
	testenv.Eventually(t, 15*time.Second, "every order paid or closed with closed_at", func() bool {
		final = map[int64]api.OrderJSON{}
		for _, o := range s.allOrders(t, "", 1000) {
			if o.Status == "pending_payment" || (o.Status == "closed" && o.ClosedAt == nil) {
				return false
			}
			final[o.ID] = o
		}
		return true
	})
	if len(final) != orders {
		t.Errorf("%d orders listed, want %d", len(final), orders)
	}

	var paidCount, closedCount, lostByLatency int
	var latencies []time.Duration
	sold := map[string]int64{}
	for i, r := range results {
		o, ok := final[r.created.ID]
		if !ok {
			t.Errorf("order %d is not listed", r.created.ID)
			continue
		}
		latencies = append(latencies, r.recv.Sub(r.sent))
		deadline := apiTimeOf(t, o.Deadline)
		if o.Deadline != r.created.Deadline || o.CreatedAt != r.created.CreatedAt {
			t.Errorf("order %d: created_at/deadline changed from %s/%s to %s/%s", o.ID, r.created.CreatedAt, r.created.Deadline, o.CreatedAt, o.Deadline)
		}
		switch r.payStatus {
		case http.StatusOK:
			paidCount++
			if r.paid.Status != "paid" || o.Status != "paid" || o.PaidAt == nil || o.ClosedAt != nil || o.CloseReason != nil ||
				o.PaymentID == nil || *o.PaymentID != fmt.Sprintf("pay-%d", i) {
				t.Errorf("order %d: pay answered 200 (%+v) but the order is %+v", o.ID, r.paid, o)
				continue
			}
			if paidAt := apiTimeOf(t, *o.PaidAt); !paidAt.Before(deadline) {
				t.Errorf("order %d: paid at %s, not before its deadline %s", o.ID, *o.PaidAt, o.Deadline)
			}
			// The server reads its clock after the request was sent.
			if r.sent.UnixMilli() >= deadline.UnixMilli() {
				t.Errorf("order %d: pay sent at %s, at or after the deadline %s, was accepted", o.ID, r.sent.UTC().Format(time.RFC3339Nano), o.Deadline)
			}
			for _, it := range o.Items {
				sold[it.SKU] += it.Quantity
			}
		case http.StatusConflict:
			closedCount++
			if o.Status != "closed" || o.ClosedAt == nil || o.CloseReason == nil || *o.CloseReason != "timeout" || o.PaidAt != nil || o.PaymentID != nil {
				t.Errorf("order %d: pay answered 409 order_not_payable but the order is %+v", o.ID, o)
				continue
			}
			if closedAt := apiTimeOf(t, *o.ClosedAt); closedAt.Before(deadline) {
				t.Errorf("order %d: closed at %s, before its deadline %s", o.ID, *o.ClosedAt, o.Deadline)
			}
			// The server read its clock before the answer arrived.
			if r.recv.UnixMilli() < deadline.UnixMilli() {
				t.Errorf("order %d: pay refused with the answer received at %s, before the deadline %s", o.ID, r.recv.UTC().Format(time.RFC3339Nano), o.Deadline)
			}
			if r.offset < 0 {
				lostByLatency++
			}
		}
	}
	slices.Sort(latencies)
	t.Logf("%d orders: %d paid, %d closed (%d of them paid up to 5ms early but refused: request latency); pay latency median %v, max %v",
		orders, paidCount, closedCount, lostByLatency, latencies[len(latencies)/2], latencies[len(latencies)-1])

	for _, sku := range skus {
		got := s.stock(t, sku)
		if got.Available+got.Reserved+got.Sold != initial || got.Reserved != 0 || got.Sold != sold[sku] {
			t.Errorf("stock of %s = %+v; want available+reserved+sold = %d, reserved 0, sold %d (the paid orders' quantities)", sku, got, initial, sold[sku])
		}
	}
}
