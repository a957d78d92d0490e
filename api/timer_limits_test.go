package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTimerFireAtHorizon: fire_at is at most a year ahead, as delay_ms is;
// beyond is 400 (it was accepted up to year 9999).
func TestTimerFireAtHorizon(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	now := time.Now().UTC()
	for _, tt := range []struct {
		at   time.Time
		want int
	}{
		{now.Add(364 * 24 * time.Hour), http.StatusCreated},
		{now.Add(365*24*time.Hour - time.Minute), http.StatusCreated},
		{now.Add(365*24*time.Hour + time.Minute), http.StatusBadRequest},
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), http.StatusBadRequest},
	} {
		body := `{"fire_at":"` + tt.at.Format(time.RFC3339Nano) + `"}`
		status, raw := s.putTimer(t, "horizon", body)
		if tt.want == http.StatusCreated && status/100 != 2 || tt.want != http.StatusCreated && status != tt.want {
			t.Errorf("%s: status %d, want %d; %s", body, status, tt.want, raw)
		}
		if status == http.StatusBadRequest {
			checkError(t, body, status, raw, http.StatusBadRequest, "invalid_argument")
			if msg := errorMessage(t, raw); !strings.HasPrefix(msg, "fire_at: must be at most 365 days ahead") {
				t.Errorf("%s: message %q", body, msg)
			}
		}
	}
}

// TestTimerWebhookMustSubscribe: a timer's webhook_id must name a webhook
// subscribed to timer.fired or "*"; one subscribed to order events only, or
// none at all, is 400 invalid_argument naming webhook_id. Otherwise any
// client could send arbitrary JSON, signed with that webhook's secret, to a
// receiver that never subscribed to timers.
func TestTimerWebhookMustSubscribe(t *testing.T) { onEveryStore(t, testTimerWebhookMustSubscribe) }

func testTimerWebhookMustSubscribe(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{WebhookAllow: "127.0.0.1"})
	orders := s.createWebhook(t, "http://127.0.0.1:9/orders", "order.closed", "order.paid")
	timers := s.createWebhook(t, "http://127.0.0.1:9/timers", "timer.fired")
	all := s.createWebhook(t, "http://127.0.0.1:9/all", "*")
	for _, tt := range []struct {
		id   int64
		want int // 0: a 2xx
	}{
		{orders.ID, http.StatusBadRequest},
		{all.ID + 1000, http.StatusBadRequest},
		{timers.ID, 0},
		{all.ID, 0},
	} {
		body := fmt.Sprintf(`{"delay_ms":60000,"webhook_id":%d}`, tt.id)
		status, raw := s.putTimer(t, fmt.Sprintf("hook-%d", tt.id), body)
		if tt.want == 0 {
			if status/100 != 2 {
				t.Errorf("webhook %d: status %d, want 2xx; %s", tt.id, status, raw)
			}
			continue
		}
		checkError(t, body, status, raw, tt.want, "invalid_argument")
		if msg := errorMessage(t, raw); !strings.HasPrefix(msg, "webhook_id: ") {
			t.Errorf("webhook %d: message %q, want it to name webhook_id", tt.id, msg)
		}
	}
	// Without the webhook service, the store's own lookup decides.
	bare := startServer(t, serverConfig{})
	status, raw := bare.putTimer(t, "hook-none", `{"delay_ms":60000,"webhook_id":7}`)
	checkError(t, "unknown webhook without the service", status, raw, http.StatusBadRequest, "invalid_argument")
}
