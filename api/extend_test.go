package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestExtendOrder: POST /v1/orders/{id}/extend on the store
// HOURGLASS_TEST_STORE names, with the engine running on the database's
// clock: 200 with the new deadline (and for a repeat of it), the 400s, the
// 404, the 409s; and the engine closes the order at its new deadline, not
// its old one.
func TestExtendOrder(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "ext-1", "", 5)
	o := s.createOrder(t, `{"user_id":"u-1","items":[{"sku":"ext-1","quantity":2}],"timeout_ms":1000}`)
	path := fmt.Sprintf("/v1/orders/%d/extend", o.ID)
	extend := func(body string) (int, []byte) {
		t.Helper()
		status, _, raw := s.call(t, http.MethodPost, path, nil, []byte(body))
		return status, raw
	}
	oldDeadline := apiTimeOf(t, o.Deadline)
	created := apiTimeOf(t, o.CreatedAt)

	status, raw := extend(`{"extend_ms":1500}`)
	if status != http.StatusOK {
		t.Fatalf("extend_ms 1500: %d %s", status, raw)
	}
	got, _ := checkOrderJSON(t, raw)
	newDeadline := apiTimeOf(t, got.Deadline)
	if !newDeadline.Equal(oldDeadline.Add(1500*time.Millisecond)) || got.Status != "pending_payment" {
		t.Fatalf("extended order = %+v; want pending until %v", got, oldDeadline.Add(1500*time.Millisecond))
	}
	// A repeat of the same extension (to the deadline it set) answers 200.
	status, raw = extend(fmt.Sprintf(`{"deadline":%q}`, got.Deadline))
	if again, _ := checkOrderJSON(t, raw); status != http.StatusOK || again.Deadline != got.Deadline {
		t.Fatalf("repeat: %d %s; want 200 with deadline %s", status, raw, got.Deadline)
	}
	for _, tt := range []struct {
		name, body, field string
	}{
		{"neither", `{}`, "deadline, extend_ms"},
		{"both", `{"extend_ms":1,"deadline":"2030-01-01T00:00:00Z"}`, "deadline, extend_ms"},
		{"zero", `{"extend_ms":0}`, "extend_ms"},
		{"too long", fmt.Sprintf(`{"extend_ms":%d}`, hourglass.MaxOrderLifetime.Milliseconds()+1), "extend_ms"},
		{"not a time", `{"deadline":"tomorrow"}`, "deadline"},
		{"not later", fmt.Sprintf(`{"deadline":%q}`, o.Deadline), "deadline"},
		{"too far", fmt.Sprintf(`{"deadline":%q}`, created.Add(hourglass.MaxOrderLifetime+time.Millisecond).Format(hourglass.TimeFormat)), "deadline"},
		{"unknown field", `{"extend":1}`, ""},
	} {
		status, raw := extend(tt.body)
		checkError(t, tt.name, status, raw, http.StatusBadRequest, "invalid_argument")
		if !strings.Contains(string(raw), tt.field) {
			t.Errorf("%s: %s does not name %q", tt.name, raw, tt.field)
		}
	}
	status, _, raw = s.call(t, http.MethodPost, "/v1/orders/999999999/extend", nil, []byte(`{"extend_ms":1000}`))
	checkError(t, "unknown order", status, raw, http.StatusNotFound, "not_found")
	paid := s.createOrder(t, `{"user_id":"u-1","items":[{"sku":"ext-1","quantity":1}],"timeout_ms":60000}`)
	s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", paid.ID), nil, []byte(`{"payment_id":"p-1"}`))
	status, _, raw = s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/extend", paid.ID), nil, []byte(`{"extend_ms":1000}`))
	checkError(t, "paid order", status, raw, http.StatusConflict, "invalid_transition")
	if msg := string(raw); !strings.Contains(msg, "it is paid") || strings.Contains(msg, "payment_id") {
		t.Errorf("extending a paid order: %s; want it to say the order is paid, not a payment_id's story", msg)
	}

	// The old deadline passes: the order stays pending (the engine's
	// timer for it closes nothing); it closes at the new one.
	testenv.Eventually(t, 10*time.Second, "the old deadline passed", func() bool {
		return time.Now().After(oldDeadline.Add(300 * time.Millisecond))
	})
	if cur := s.order(t, o.ID); cur.Status != "pending_payment" {
		t.Fatalf("300 ms after the old deadline the order is %s; want pending until %v", cur.Status, newDeadline)
	}
	var closed = s.order(t, o.ID)
	testenv.Eventually(t, 10*time.Second, "order closed", func() bool {
		closed = s.order(t, o.ID)
		return closed.ClosedAt != nil
	})
	if lag := apiTimeOf(t, *closed.ClosedAt).Sub(newDeadline); lag < 0 || lag >= time.Second {
		t.Errorf("closed_at - new deadline = %v, want in [0, 1s)", lag)
	}
	s.wantStock(t, "after the close", "ext-1", stock{4, 0, 1})
	status, raw = extend(`{"extend_ms":1000}`)
	checkError(t, "closed order", status, raw, http.StatusConflict, "invalid_transition")
}
