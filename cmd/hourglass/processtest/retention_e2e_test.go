package processtest

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestBoundsServed: a serving process bounds timers at --timer-max (the
// third new key gets 409 limit_exceeded, a re-arm passes) and dead letters
// at --dead-letter-max (the oldest dropped and counted, the near-max alert
// firing), with the pruner running on its own.
func TestBoundsServed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := binary(t)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusBadGateway)
	}))
	t.Cleanup(broken.Close)
	p := startHourglass(t, "hourglass", bin, dir+"/data",
		"--timer-max", "2", "--dead-letter-max", "1", "--prune-interval", "1s", "--alert-interval", "50ms",
		"--webhook-allow", "127.0.0.1", "--webhook-retry", "10ms", "--webhook-jitter", "0")
	c := api.NewClient(p.url, "", nil)
	ctx := t.Context()

	put := func(key string, delayMs int) error {
		_, err := c.Do(ctx, http.MethodPut, "/v1/timers/"+key, nil, map[string]any{"delay_ms": delayMs}, nil)
		return err
	}
	for _, key := range []string{"a", "b"} {
		if err := put(key, 3_600_000); err != nil {
			t.Fatalf("PUT %s: %v", key, err)
		}
	}
	var ae *api.Error
	if err := put("c", 3_600_000); !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "limit_exceeded" {
		t.Fatalf("PUT c beyond --timer-max 2: %v; want 409 limit_exceeded", err)
	}
	if err := put("a", 7_200_000); err != nil {
		t.Fatalf("re-arm a at the maximum: %v", err)
	}
	if got := metricLine(t, p.url, `hourglass_timers_refused_total`); got != "1" {
		t.Errorf("hourglass_timers_refused_total = %q, want 1", got)
	}

	if _, err := c.CreateWebhook(ctx, api.CreateWebhookRequest{URL: broken.URL, Events: []string{"order.created"}, Secret: "0123456789abcdef"}); err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	if _, err := c.PutProduct(ctx, "MUG-1", "Mug", "", 5); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Do(ctx, http.MethodPost, "/v1/orders", nil, map[string]any{"user_id": "u", "items": []map[string]any{{"sku": "MUG-1", "quantity": 1}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	dropped := "(not read)"
	testenv.EventuallyEvery(t, 30*time.Second, 50*time.Millisecond, "hourglass_dead_letters_dropped_total = 2 (3 dead letters, 1 kept)", func() bool {
		if v := metricLine(t, p.url, `hourglass_dead_letters_dropped_total`); v != dropped {
			dropped = v
			t.Logf("hourglass_dead_letters_dropped_total = %q", v) // the last one logged is the value on a failure
		}
		return dropped == "2"
	})
	var page struct {
		DeadLetters []map[string]any `json:"deadletters"`
	}
	if _, err := c.Do(ctx, http.MethodGet, "/v1/deadletters", nil, nil, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.DeadLetters) != 1 {
		t.Errorf("GET /v1/deadletters: %d dead letters, want 1", len(page.DeadLetters))
	}
	if got := metricLine(t, p.url, `hourglass_alerts_firing{rule="dead_letters_near_max"}`); got != "1" {
		t.Errorf(`hourglass_alerts_firing{rule="dead_letters_near_max"} = %q, want 1`, got)
	}
}
