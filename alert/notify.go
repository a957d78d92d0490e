package alert

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/timing"
)

// Notification states.
const (
	StateFiring   = "firing"
	StateResolved = "resolved"
)

// Defaults of WebhookConfig.
const (
	WebhookAttemptsDefault = 4
	WebhookBackoffDefault  = time.Second
	WebhookTimeoutDefault  = 5 * time.Second
	// webhookQueue is how many notifications may wait for delivery; state
	// changes are rare, so a full queue means the receiver has been down
	// for a long time and the oldest news is the least useful.
	webhookQueue = 256
)

// Notification is the JSON body POSTed to the alert webhook: once when a
// rule starts firing and once when it resolves. Times are RFC 3339 UTC with
// milliseconds; resolved_at is null while firing.
type Notification struct {
	Rule       string  `json:"rule"`
	State      string  `json:"state"` // StateFiring or StateResolved
	Value      float64 `json:"value"`
	Threshold  float64 `json:"threshold"`
	Summary    string  `json:"summary"`
	StartedAt  *string `json:"started_at"`
	ResolvedAt *string `json:"resolved_at"`
}

// TimeFormat is the format of the notification's times (the API's).
const TimeFormat = "2006-01-02T15:04:05.000Z"

func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(TimeFormat)
	return &s
}

// notifier POSTs notifications one at a time, in the order they were
// queued, each retried with exponential backoff.
type notifier struct {
	cfg   WebhookConfig
	log   *slog.Logger
	http  *http.Client
	queue chan Notification
}

func newNotifier(cfg WebhookConfig, log *slog.Logger) *notifier {
	cfg.Attempts = cmp.Or(cfg.Attempts, WebhookAttemptsDefault)
	cfg.Backoff = cmp.Or(cfg.Backoff, WebhookBackoffDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, WebhookTimeoutDefault)
	return &notifier{
		cfg:   cfg,
		log:   log,
		http:  &http.Client{Timeout: cfg.Timeout},
		queue: make(chan Notification, webhookQueue),
	}
}

// enqueue queues n without blocking; when the queue is full, n is logged and
// dropped.
func (w *notifier) enqueue(n Notification) {
	select {
	case w.queue <- n:
	default:
		w.log.Error("alert: webhook queue full; notification dropped", "rule", n.Rule, "state", n.State)
	}
}

// run delivers queued notifications until ctx ends.
func (w *notifier) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			if left := len(w.queue); left > 0 {
				w.log.Warn("alert: stopping with webhook notifications undelivered", "notifications", left)
			}
			return
		case n := <-w.queue:
			w.deliver(ctx, n)
		}
	}
}

// deliver POSTs n up to Attempts times, waiting Backoff, 2*Backoff, … between
// attempts. A 2xx answer is a delivery; anything else is retried.
func (w *notifier) deliver(ctx context.Context, n Notification) {
	body, err := json.Marshal(n)
	if err != nil {
		w.log.Error("alert: encode webhook notification", "rule", n.Rule, "err", err)
		return
	}
	backoff := timing.Backoff{Min: w.cfg.Backoff, Max: w.cfg.Backoff << min(w.cfg.Attempts, 20)} // doubling; Attempts bounds it
	for attempt := 1; ; attempt++ {
		err := w.post(ctx, body)
		if err == nil {
			w.log.Debug("alert: webhook notified", "rule", n.Rule, "state", n.State, "attempt", attempt)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if attempt >= w.cfg.Attempts {
			w.log.Error("alert: webhook notification failed; giving up", "rule", n.Rule, "state", n.State, "attempts", attempt, "err", err)
			return
		}
		wait := backoff.Next()
		w.log.Warn("alert: webhook notification failed; retrying", "rule", n.Rule, "state", n.State, "attempt", attempt, "retry_in", wait, "err", err)
		if timing.Sleep(ctx, hourglass.SystemClock{}, wait) != nil {
			return
		}
	}
}

func (w *notifier) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("alert: webhook request: %w", redact.Err(err, w.cfg.URL))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hourglass-alerts")
	resp, err := w.http.Do(req)
	if err != nil {
		return fmt.Errorf("alert: webhook POST: %w", redact.Err(err, w.cfg.URL))
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("alert: webhook POST: status %d", resp.StatusCode)
	}
	return nil
}
