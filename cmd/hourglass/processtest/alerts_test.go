package processtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/api"
)

// TestAlertWebhookFromBinary runs `hourglass serve` with an alert webhook
// and webhooks to a receiver that always fails: the delivery becomes a dead
// letter, the dead_letters rule fires (one POST to the alert webhook, the
// metric is 1), and deleting the dead letter resolves it (one more POST).
// The dashboard page is served at /.
func TestAlertWebhookFromBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := binary(t)

	notes := make(chan alert.Notification, 10)
	alerts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n alert.Notification
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			t.Errorf("alert webhook body: %v", err)
		}
		notes <- n
	}))
	t.Cleanup(alerts.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusBadGateway)
	}))
	t.Cleanup(broken.Close)

	p := startHourglass(t, "hourglass", bin, dir+"/data",
		"--alert-webhook", alerts.URL, "--alert-interval", "50ms",
		"--webhook-allow", "127.0.0.1", "--webhook-retry", "10ms", "--webhook-jitter", "0")
	c := api.NewClient(p.url, "", nil)
	ctx := t.Context()
	if _, err := c.CreateWebhook(ctx, api.CreateWebhookRequest{URL: broken.URL, Events: []string{"order.cancelled"}, Secret: "0123456789abcdef"}); err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	if _, err := c.PutProduct(ctx, "MUG-1", "Mug", "", 5); err != nil {
		t.Fatal(err)
	}
	var o api.OrderJSON
	if _, err := c.Do(ctx, http.MethodPost, "/v1/orders", nil, map[string]any{"user_id": "u", "items": []map[string]any{{"sku": "MUG-1", "quantity": 1}}}, &o); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, http.MethodPost, "/v1/orders/"+itoa(o.ID)+"/cancel", nil, nil, nil); err != nil {
		t.Fatal(err)
	}

	next := func(want string) alert.Notification {
		t.Helper()
		select {
		case n := <-notes:
			if n.Rule != alert.RuleDeadLetters || n.State != want || n.StartedAt == nil {
				t.Fatalf("alert webhook got %+v, want dead_letters %s", n, want)
			}
			return n
		case <-time.After(30 * time.Second):
			t.Fatalf("alert webhook: no %s notification in 30s", want)
			return alert.Notification{}
		}
	}
	n := next(alert.StateFiring)
	if n.Value != 1 || n.Threshold != 0 || n.ResolvedAt != nil {
		t.Errorf("firing %+v, want value 1, threshold 0, resolved_at null", n)
	}
	if got := metricLine(t, p.url, `hourglass_alerts_firing{rule="dead_letters"}`); got != "1" {
		t.Errorf("hourglass_alerts_firing{rule=dead_letters} = %q, want 1", got)
	}
	if got := metricLine(t, p.url, `hourglass_webhook_dead_letters`); got != "1" {
		t.Errorf("hourglass_webhook_dead_letters = %q, want 1", got)
	}

	var dead api.DeadLetterListJSON
	if _, err := c.Do(ctx, http.MethodGet, "/v1/deadletters", nil, nil, &dead); err != nil || len(dead.DeadLetters) != 1 {
		t.Fatalf("dead letters: %+v, %v", dead, err)
	}
	if _, err := c.Do(ctx, http.MethodDelete, "/v1/deadletters/"+itoa(dead.DeadLetters[0].ID), nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	n = next(alert.StateResolved)
	if n.Value != 0 || n.ResolvedAt == nil {
		t.Errorf("resolve %+v, want value 0 with resolved_at", n)
	}
	select {
	case n := <-notes:
		t.Errorf("unexpected notification %+v", n)
	default:
	}

	resp, err := http.Get(p.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "/dashboard/app.js") {
		t.Errorf("GET /: %d %.100s, want the dashboard page", resp.StatusCode, body)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// metricLine returns the value of one series from GET /metrics.
func metricLine(t testing.TB, url, series string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v
		}
	}
	return ""
}
