package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/api"
)

// parseServe parses `hourglass serve` arguments as main does.
func parseServe(t *testing.T, args ...string) (*serveCmd, error) {
	t.Helper()
	var c cli
	parser, err := kong.New(&c, kong.Name("hourglass"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = parser.Parse(append([]string{"serve"}, args...))
	return &c.Serve, err
}

// TestAlertFlags: the defaults are the documents' thresholds; flags and
// environment variables set them; out-of-range values name the flag.
func TestAlertFlags(t *testing.T) {
	s, err := parseServe(t)
	if err != nil {
		t.Fatal(err)
	}
	want := alertFlags{
		AlertInterval: 5 * time.Second, AlertWindow: time.Minute, AlertCloseBacklog: alert.CloseBacklogDefault,
		AlertCloseLatenessP99: alert.CloseLatenessP99Default, AlertCloseFailureRate: alert.CloseFailureRateDefault,
		AlertStockReleaseFailures: alert.StockReleaseFailuresDefault, AlertDeadLetters: 0, Dashboard: true,
	}
	if s.alertFlags != want {
		t.Errorf("defaults %+v, want %+v", s.alertFlags, want)
	}
	if err := s.alertFlags.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}

	t.Setenv("HOURGLASS_ALERT_CLOSE_BACKLOG", "7")
	t.Setenv("HOURGLASS_DASHBOARD", "false")
	s, err = parseServe(t, "--alert-webhook", "http://127.0.0.1:9/alerts", "--alert-close-lateness-p99", "500ms",
		"--alert-close-failure-rate", "0.05", "--alert-stock-release-failures", "2.5", "--alert-dead-letters", "3",
		"--alert-interval", "50ms", "--alert-window", "30s")
	if err != nil {
		t.Fatal(err)
	}
	want = alertFlags{
		AlertWebhook: "http://127.0.0.1:9/alerts", AlertInterval: 50 * time.Millisecond, AlertWindow: 30 * time.Second,
		AlertCloseBacklog: 7, AlertCloseLatenessP99: 500 * time.Millisecond, AlertCloseFailureRate: 0.05,
		AlertStockReleaseFailures: 2.5, AlertDeadLetters: 3, Dashboard: false,
	}
	if s.alertFlags != want {
		t.Errorf("set %+v, want %+v", s.alertFlags, want)
	}
	if s, err := parseServe(t, "--no-dashboard"); err != nil || s.Dashboard {
		t.Errorf("--no-dashboard: dashboard %v, %v", s.Dashboard, err)
	}

	for _, tc := range []struct {
		arg, value, want string
	}{
		{"--alert-close-backlog", "0", "--alert-close-backlog must be at least 1"},
		{"--alert-close-lateness-p99", "0s", "--alert-close-lateness-p99 must be above 0"},
		{"--alert-close-failure-rate", "1", "--alert-close-failure-rate must be a fraction"},
		{"--alert-close-failure-rate", "0", "--alert-close-failure-rate must be a fraction"},
		{"--alert-stock-release-failures", "0", "--alert-stock-release-failures must be above 0"},
		{"--alert-dead-letters", "-1", "--alert-dead-letters must be at least 0"},
		{"--alert-interval", "1ms", "--alert-interval must be between"},
		{"--alert-window", "10m", "--alert-window must be between 1s and 5m0s"},
	} {
		s, err := parseServe(t, tc.arg+"="+tc.value)
		if err != nil {
			t.Fatalf("parse %s=%s: %v", tc.arg, tc.value, err)
		}
		if err := s.alertFlags.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: %v, want an error containing %q", tc.arg, tc.value, err, tc.want)
		}
	}
}

// TestAlertWebhookFromBinary runs `hourglass serve` with an alert webhook
// and webhooks to a receiver that always fails: the delivery becomes a dead
// letter, the dead_letters rule fires (one POST to the alert webhook, the
// metric is 1), and deleting the dead letter resolves it (one more POST).
// The dashboard page is served at /.
func TestAlertWebhookFromBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := buildBinary(t, dir)

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
