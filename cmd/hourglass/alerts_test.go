package main

import (
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hourglass/hourglass/alert"
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
