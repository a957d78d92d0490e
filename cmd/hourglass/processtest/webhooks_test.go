package processtest

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
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/storetest"
	"github.com/hourglass/hourglass/webhook"
)

// TestWebhooksSurviveKill: SIGKILL while every order's first event is
// waiting for a retry (its delivery failed) and its later events wait behind
// it loses none: after a restart each event reaches the (now working)
// receiver, in order per order, and none is a dead letter.
func TestWebhooksSurviveKill(t *testing.T) {
	testenv.EveryCase(t, testenv.Default, stores, nil, testWebhooksSurviveKill)
}

func testWebhooksSurviveKill(t *testing.T) {
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
	bin := binary(t)
	dataDir := filepath.Join(dir, "data")
	args := []string{"--webhook-allow", "127.0.0.1", "--webhook-retry", "1s,2s,4s", "--webhook-jitter", "0",
		"--database-url", storetest.URL(t)}
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
