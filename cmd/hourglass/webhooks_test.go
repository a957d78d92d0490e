package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/store/storetest"
	"github.com/hourglass/hourglass/webhook"
)

// TestWebhooksSurviveKill: SIGKILL while every order's first event is
// waiting for a retry (its delivery failed) and its later events wait behind
// it loses none: after a restart each event reaches the (now working)
// receiver, in order per order, and none is a dead letter.
func TestWebhooksSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds, runs and kills the binary; skipped with -short")
	}
	const secret = "crash-test-secret-0123"
	var (
		mu      sync.Mutex
		healthy bool
		got     []receivedEvent
		arrived = make(chan struct{}, 100000)
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var ev api.EventJSON
		err := json.Unmarshal(raw, &ev)
		if err == nil {
			err = webhook.Verify(r.Header.Get(webhook.SignatureHeader), secret, raw, time.Now(), time.Minute)
		}
		mu.Lock()
		ok := healthy
		got = append(got, receivedEvent{ev: ev, ok: ok, err: err})
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		arrived <- struct{}{}
	}))
	defer receiver.Close()
	snapshot := func() []receivedEvent {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	waitFor := func(what string, cond func([]receivedEvent) bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for !cond(snapshot()) {
			select {
			case <-arrived:
			case <-timeout:
				t.Fatalf("%s: not after 30s", what)
			}
		}
	}

	dir := t.TempDir()
	bin := buildBinary(t, dir)
	dataDir := filepath.Join(dir, "data")
	args := []string{"--webhook-allow", "127.0.0.1", "--webhook-retry", "1s,2s,4s", "--webhook-jitter", "0",
		"--database-url", storetest.URL(t)} // HOURGLASS_TEST_STORE picks the store; SQLite by default
	first := startHourglass(t, "first run", bin, dataDir, args...)
	client := api.NewClient(first.url, "", &http.Client{Timeout: 10 * time.Second})
	ctx := t.Context()
	if _, err := client.CreateWebhook(ctx, api.CreateWebhookRequest{URL: receiver.URL + "/hook", Events: []string{"*"}, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutProduct(ctx, "hook-a", "", "", 1000); err != nil {
		t.Fatal(err)
	}
	// 20 orders: 8 paid, 6 cancelled, 6 left to close on a 1 s deadline.
	want := map[int64][]string{}
	for i := range 20 {
		o, _, err := client.CreateOrder(ctx, api.CreateOrderRequest{UserID: fmt.Sprint("u", i), Items: []api.ItemJSON{{SKU: "hook-a", Quantity: 1}}, TimeoutMs: 1000}, "")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i < 8:
			_, err = client.Pay(ctx, o.ID, fmt.Sprint("p", i))
			want[o.ID] = []string{"order.created", "order.paid"}
		case i < 14:
			_, err = client.Transition(ctx, o.ID, "cancel")
			want[o.ID] = []string{"order.created", "order.cancelled"}
		default:
			want[o.ID] = []string{"order.created", "order.closed"}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	events := 0
	for _, w := range want {
		events += len(w)
	}
	// Every order's first event was attempted and failed: it waits for its
	// retry, and the order's later events wait for it (in order per order).
	// Kill now.
	waitFor("a failed attempt of every order's created event", func(rs []receivedEvent) bool {
		n := 0
		for _, r := range rs {
			if r.ev.Type == "order.created" && r.ev.Order.ID > 0 {
				n++
			}
		}
		return len(distinct(rs)) >= len(want) && n >= len(want)
	})
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	before := distinct(snapshot())
	for _, r := range snapshot() {
		if r.ok {
			t.Fatalf("an event was delivered before the kill: %+v", r.ev)
		}
	}
	t.Logf("killed with %d events written, %d of them attempted (%d failed attempts), all pending", events, len(before), len(snapshot()))

	mu.Lock()
	healthy = true
	mu.Unlock()
	second := startHourglass(t, "restart", bin, dataDir, args...)
	client = api.NewClient(second.url, "", &http.Client{Timeout: 10 * time.Second})
	waitFor("every event delivered after the restart", func(rs []receivedEvent) bool {
		n := 0
		for id := range distinct(rs) {
			if delivered(rs, id) {
				n++
			}
		}
		return n == events
	})

	rs := snapshot()
	for id := range before {
		if !delivered(rs, id) {
			t.Errorf("event %s pending at the kill was never delivered", id)
		}
	}
	// Per order, the deliveries that succeeded came in the order of the events.
	byOrder := map[int64][]string{}
	seen := map[string]bool{}
	for _, r := range rs {
		if r.err != nil {
			t.Errorf("delivery of %s: %v", r.ev.ID, r.err)
		}
		if r.ok && !seen[r.ev.ID] {
			seen[r.ev.ID] = true
			byOrder[r.ev.Order.ID] = append(byOrder[r.ev.Order.ID], r.ev.Type)
		}
	}
	for id, w := range want {
		if !slices.Equal(byOrder[id], w) {
			t.Errorf("order %d: delivered %v, want %v", id, byOrder[id], w)
		}
	}
	l, err := client.DeadLetters(ctx, 0, 0)
	if err != nil || len(l.DeadLetters) != 0 {
		t.Errorf("dead letters after the restart: %+v, %v", l, err)
	}
}

type receivedEvent struct {
	ev  api.EventJSON
	ok  bool // answered 2xx
	err error
}

func distinct(rs []receivedEvent) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		if strings.HasPrefix(r.ev.ID, "evt_") {
			out[r.ev.ID] = true
		}
	}
	return out
}

func delivered(rs []receivedEvent, id string) bool {
	for _, r := range rs {
		if r.ev.ID == id && r.ok {
			return true
		}
	}
	return false
}

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
