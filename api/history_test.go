package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestHistory: through a node (node.New wires the node id into the
// engine), an order the engine closed says when, how late, by what and on
// which node; an extended one lists its deadlines, its first unknown; a
// fired timer says the same of its fire; unknown ids and keys are 404
// not_found, malformed ones 400 invalid_argument.
func TestHistory(t *testing.T) {
	onEveryStore(t, func(t *testing.T) {
		s := startServer(t, serverConfig{WebhookAllow: "127.0.0.1"})
		ctx := context.Background()
		c := s.Client
		if _, err := c.PutProduct(ctx, "A", "A", "x", 10); err != nil {
			t.Fatal(err)
		}
		// Every order.created is delivered (and its row deleted): the
		// history still shows the delivery and its attempt, from the log.
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
		t.Cleanup(receiver.Close)
		hook, err := c.CreateWebhook(ctx, api.CreateWebhookRequest{URL: receiver.URL, Events: []string{"order.created"}, Secret: "a-webhook-secret-of-32-bytes-xxx"})
		if err != nil {
			t.Fatal(err)
		}
		create := func(timeoutMs int64) api.OrderJSON {
			t.Helper()
			o, _, err := c.CreateOrder(ctx, api.CreateOrderRequest{UserID: "u", Items: []api.ItemJSON{{SKU: "A", Quantity: 1}}, TimeoutMs: timeoutMs}, "")
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		closed := create(1000)
		extended := create(60000)
		if _, err := c.ExtendOrder(ctx, extended.ID, api.ExtendOrderRequest{ExtendMs: 60000}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ArmTimer(ctx, "history:t", api.ArmTimerRequest{DelayMs: api.Delay(0)}); err != nil {
			t.Fatal(err)
		}

		var h api.HistoryJSON
		testenv.Eventually(t, 15*time.Second, "the order closed", func() bool {
			var err error
			h, err = c.OrderHistory(ctx, closed.ID)
			return err == nil && h.Timing.ClosedAt != nil
		})
		if h.Kind != "order" || len(h.Events) != 2 || h.Events[0].Type != "order.created" || h.Events[1].Type != "order.closed" {
			t.Fatalf("history events = %+v", h.Events)
		}
		testenv.Eventually(t, 15*time.Second, "the order.created delivery in the history", func() bool {
			h, _ = c.OrderHistory(ctx, closed.ID)
			return len(h.Events) == 2 && len(h.Events[0].Deliveries) == 1 && h.Events[0].Deliveries[0].State == "delivered"
		})
		if d := h.Events[0].Deliveries[0]; d.WebhookID != hook.ID || d.AttemptCount != 1 || len(d.Attempts) != 1 ||
			d.Attempts[0].StatusCode == nil || *d.Attempts[0].StatusCode != 200 || d.Attempts[0].Outcome != "delivered" || d.Attempts[0].At == nil {
			t.Fatalf("order.created's delivery = %+v", d)
		}
		tm := h.Timing
		if len(tm.Deadlines) != 1 || tm.Deadlines[0].Deadline == nil || *tm.Deadlines[0].Deadline != closed.Deadline || *tm.Deadline != closed.Deadline {
			t.Fatalf("deadlines = %+v, want the one %s", tm.Deadlines, closed.Deadline)
		}
		if tm.ClosedBy == nil || *tm.ClosedBy == api.Unknown || tm.Node == nil || *tm.Node == "" || *tm.Node == api.Unknown {
			t.Fatalf("closed by %v on %v; want a cause and this node recorded", tm.ClosedBy, tm.Node)
		}
		if tm.LatenessMs == nil || *tm.LatenessMs < 0 || *tm.LatenessMs > 10000 {
			t.Fatalf("lateness = %v", tm.LatenessMs)
		}
		if ev := h.Events[1]; *ev.ClosedBy != *tm.ClosedBy || *ev.Node != *tm.Node || h.Events[0].ClosedBy != nil {
			t.Fatalf("events' provenance = %+v", h.Events)
		}

		h, err = c.OrderHistory(ctx, extended.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := h.Timing.Deadlines; len(d) != 2 || d[0].Deadline != nil || d[0].SetBy != "order.created" || d[1].SetBy != "order.extended" || d[1].Deadline == nil || *d[1].Deadline != *h.Timing.Deadline {
			t.Fatalf("extended order's deadlines = %+v (deadline %v)", d, h.Timing.Deadline)
		}
		if h.Timing.ClosedAt != nil || h.Timing.ClosedBy != nil {
			t.Fatalf("a pending order's timing says closed: %+v", h.Timing)
		}

		testenv.Eventually(t, 15*time.Second, "the timer fired", func() bool {
			h, err = c.TimerHistory(ctx, "history:t")
			return err == nil && h.Timing.ClosedAt != nil
		})
		if h.Kind != "timer" || len(h.Events) != 1 || h.Events[0].Type != "timer.fired" || *h.Timing.ClosedBy == api.Unknown || *h.Timing.LatenessMs < 0 {
			t.Fatalf("timer history = %+v", h)
		}

		for _, tc := range []struct {
			call func() error
			code string
		}{
			{func() error { _, err := c.OrderHistory(ctx, 1<<40); return err }, string(hourglass.CodeNotFound)},
			{func() error { _, err := c.TimerHistory(ctx, "no-such-timer"); return err }, string(hourglass.CodeNotFound)},
			{func() error { _, err := c.TimerHistory(ctx, "bad key"); return err }, string(hourglass.CodeInvalidArgument)},
			{func() error { _, err := c.Do(ctx, "GET", "/v1/orders/-1/history", nil, nil, nil); return err }, string(hourglass.CodeInvalidArgument)},
			{func() error { _, err := c.Do(ctx, "GET", "/v1/orders/x/history", nil, nil, nil); return err }, string(hourglass.CodeInvalidArgument)},
		} {
			var e *api.Error
			if err := tc.call(); !errors.As(err, &e) || e.Code != tc.code || e.Status >= 500 {
				t.Errorf("got %v, want %s", err, tc.code)
			}
		}
	})
}
