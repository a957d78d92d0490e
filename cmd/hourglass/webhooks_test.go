package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWebhookFlags: a bad webhook flag stops start-up with a message naming
// the flag; the flags' zero values mean "none" and "forever".
func TestWebhookFlags(t *testing.T) {
	t.Parallel()
	ok := webhookFlags{WebhookAllow: "hooks.example.com", WebhookRetry: []time.Duration{time.Minute}, WebhookJitter: 0.2,
		WebhookTimeout: 10 * time.Second, WebhookWorkers: 16, EventRetention: 168 * time.Hour, WebhookMax: 100}
	tests := []struct {
		name   string
		change func(f *webhookFlags)
		want   string // in the error; "" for valid
	}{
		{"defaults", func(*webhookFlags) {}, ""},
		{"no jitter, keep events forever", func(f *webhookFlags) { f.WebhookJitter, f.EventRetention = 0, 0 }, ""},
		{"bad allow entry", func(f *webhookFlags) { f.WebhookAllow = "https://x/" }, "--webhook-allow"},
		{"no retry", func(f *webhookFlags) { f.WebhookRetry = nil }, "--webhook-retry: at least one"},
		{"zero retry", func(f *webhookFlags) { f.WebhookRetry = []time.Duration{0} }, "--webhook-retry: each delay"},
		{"too many retries", func(f *webhookFlags) { f.WebhookRetry = slices.Repeat([]time.Duration{time.Second}, 21) }, "at most 20"},
		{"jitter", func(f *webhookFlags) { f.WebhookJitter = 2 }, "--webhook-jitter"},
		{"timeout", func(f *webhookFlags) { f.WebhookTimeout = 0 }, "--webhook-timeout"},
		{"workers", func(f *webhookFlags) { f.WebhookWorkers = 0 }, "--webhook-workers"},
		{"retention", func(f *webhookFlags) { f.EventRetention = time.Second }, "--event-retention"},
		{"no webhooks", func(f *webhookFlags) { f.WebhookMax = 0 }, "--webhook-max: must be between 1 and 10000, got 0"},
		{"too many webhooks", func(f *webhookFlags) { f.WebhookMax = 10001 }, "--webhook-max: must be between 1 and 10000"},
		{"many webhooks", func(f *webhookFlags) { f.WebhookMax = 10000 }, ""},
		{"private allowed", func(f *webhookFlags) { f.WebhookAllowPrivate = true }, ""},
	}
	for _, tt := range tests {
		f := ok
		tt.change(&f)
		cfg, err := f.config()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
		if tt.name == "many webhooks" && cfg.MaxWebhooks != 10000 || tt.name == "private allowed" && !cfg.AllowPrivate {
			t.Errorf("%s: config %+v", tt.name, cfg)
		}
		if tt.name == "no jitter, keep events forever" && cfg.Jitter >= 0 {
			t.Errorf("zero flags gave jitter %g; want none (negative)", cfg.Jitter)
		}
	}
}
