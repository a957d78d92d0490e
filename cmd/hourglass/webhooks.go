package main

import (
	"fmt"
	"time"

	"github.com/hourglass/hourglass/webhook"
)

// webhookFlags are the webhook delivery settings.
type webhookFlags struct {
	WebhookAllow        string          `help:"Hosts webhooks may target, comma-separated: host, host:port, *.domain or an IP. Loopback and link-local addresses only when listed. Empty: no webhook can be created." env:"HOURGLASS_WEBHOOK_ALLOW"`
	WebhookAllowPrivate bool            `help:"Let hosts matched only by a wildcard --webhook-allow entry resolve to private addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7); exact entries may regardless." env:"HOURGLASS_WEBHOOK_ALLOW_PRIVATE"`
	WebhookMax          int             `help:"How many webhooks may exist at once (1 to 10000); a create beyond it is refused with 409 limit_exceeded." default:"100" env:"HOURGLASS_WEBHOOK_MAX"`
	WebhookRetry        []time.Duration `help:"Delays before each retry of a failed webhook delivery, comma-separated; after the last, the delivery becomes a dead letter." default:"1m,2m,4m" env:"HOURGLASS_WEBHOOK_RETRY"`
	WebhookJitter       float64         `help:"Fraction each retry delay is varied by, at random (0 for none, at most 1)." default:"0.2" env:"HOURGLASS_WEBHOOK_JITTER"`
	WebhookTimeout      time.Duration   `help:"How long a webhook receiver has to answer; no 2xx answer within it is a failure." default:"10s" env:"HOURGLASS_WEBHOOK_TIMEOUT"`
	WebhookWorkers      int             `help:"Webhook deliveries sent at once." default:"16" env:"HOURGLASS_WEBHOOK_WORKERS"`
	// EventRetention goes to the pruner (retention.go).
	EventRetention time.Duration `help:"How long order events are kept once no webhook delivery needs them (0: forever)." default:"168h" env:"HOURGLASS_EVENT_RETENTION"`
}

// config returns the webhook.Config the flags describe, or an error naming
// the flag to fix.
func (f *webhookFlags) config() (webhook.Config, error) {
	allow, err := webhook.ParseAllowList(f.WebhookAllow)
	if err != nil {
		return webhook.Config{}, fmt.Errorf("--webhook-allow: %w", err)
	}
	if len(f.WebhookRetry) == 0 {
		return webhook.Config{}, fmt.Errorf("--webhook-retry: at least one delay is required, e.g. 1m,2m,4m")
	}
	if len(f.WebhookRetry) > webhook.MaxRetries {
		return webhook.Config{}, fmt.Errorf("--webhook-retry: at most %d delays, got %d", webhook.MaxRetries, len(f.WebhookRetry))
	}
	for _, d := range f.WebhookRetry {
		if d < time.Millisecond || d > 24*time.Hour {
			return webhook.Config{}, fmt.Errorf("--webhook-retry: each delay must be between 1ms and 24h, got %s", d)
		}
	}
	if f.WebhookJitter < 0 || f.WebhookJitter > 1 {
		return webhook.Config{}, fmt.Errorf("--webhook-jitter: must be between 0 and 1, got %g", f.WebhookJitter)
	}
	if f.WebhookTimeout < time.Millisecond || f.WebhookTimeout > 10*time.Minute {
		return webhook.Config{}, fmt.Errorf("--webhook-timeout: must be between 1ms and 10m, got %s", f.WebhookTimeout)
	}
	if f.WebhookWorkers < 1 || f.WebhookWorkers > 1024 {
		return webhook.Config{}, fmt.Errorf("--webhook-workers: must be between 1 and 1024, got %d", f.WebhookWorkers)
	}
	if f.WebhookMax < 1 || f.WebhookMax > webhook.MaxWebhooksLimit {
		return webhook.Config{}, fmt.Errorf("--webhook-max: must be between 1 and %d, got %d", webhook.MaxWebhooksLimit, f.WebhookMax)
	}
	if f.EventRetention < 0 || (f.EventRetention > 0 && f.EventRetention < time.Minute) {
		return webhook.Config{}, fmt.Errorf("--event-retention: must be 0 (forever) or at least 1m, got %s", f.EventRetention)
	}
	cfg := webhook.Config{
		Allow:        allow,
		AllowPrivate: f.WebhookAllowPrivate,
		MaxWebhooks:  f.WebhookMax,
		Retry:        f.WebhookRetry,
		Jitter:       f.WebhookJitter,
		Timeout:      f.WebhookTimeout,
		Workers:      f.WebhookWorkers,
	}
	// The flag's zero means "none"; the config's zero means the default.
	if cfg.Jitter == 0 {
		cfg.Jitter = -1
	}
	return cfg, cfg.Validate()
}
