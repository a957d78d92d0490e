package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// chromiumPath is Debian's chromium package (.ci/run installs it).
const chromiumPath = "/usr/bin/chromium"

// newBrowser starts headless Chromium with a fresh profile, or skips the
// test when it is not installed (and fails it under CI=true). The flags keep
// it from reaching for the network on its own (update checks, sync, QUIC):
// only the test server is contacted. Page errors (uncaught exceptions,
// console.error) are collected in *pageErrors.
func newBrowser(t *testing.T) (ctx context.Context, pageErrors func() []string) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found and CI=true: install Debian's chromium package", chromiumPath)
		}
		t.Skipf("%s not found: install Debian's chromium package to run the browser test", chromiumPath)
	}
	// The whole browser lives at most this long: a hang fails the test
	// instead of blocking the run.
	root, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(stop)
	var chromeOut syncBuffer
	alloc, cancelAlloc := chromedp.NewExecAllocator(root,
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1200),
		chromedp.CombinedOutput(&chromeOut),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium output:\n%s", chromeOut.String())
		}
	})
	var mu sync.Mutex
	var errs []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			errs = append(errs, fmt.Sprintf("uncaught at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				errs = append(errs, "console.error: "+strings.Join(args, " "))
			}
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(errs) }
}

// run runs one browser action, failing the test on error.
func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// click clicks the element sel selects (waiting up to 10 s for it), in
// the page's own event loop: a list the page re-renders on its live
// refresh may replace the element between a lookup and a click sent from
// outside ("Could not find node with given id").
func click(t *testing.T, ctx context.Context, what, sel string) {
	t.Helper()
	q, _ := json.Marshal(sel) // a string: cannot fail
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false; el.click(); return true })()`, q)
	testenv.Eventually(t, 10*time.Second, what, func() bool { return run(t, ctx, what, chromedp.Evaluate[bool](js)) })
}

// shownCounts returns the order counts the page shows, by status.
func shownCounts(t *testing.T, ctx context.Context) map[string]int64 {
	t.Helper()
	return shownTiles(t, ctx, "orders")
}

// shownTiles returns the counts by status the page shows in the tiles of
// section ("orders" or "timers").
func shownTiles(t *testing.T, ctx context.Context, section string) map[string]int64 {
	t.Helper()
	texts := run(t, ctx, "read "+section+" counts", chromedp.Evaluate[map[string]string](`(() => {
		const out = {};
		for (const el of document.querySelectorAll('#`+section+` [id^="`+section+`-"]')) out[el.id.slice('`+section+`-'.length)] = el.textContent;
		return out;
	})()`))
	out := map[string]int64{}
	for status, text := range texts {
		n, err := strconv.ParseInt(strings.ReplaceAll(text, ",", ""), 10, 64)
		if err != nil {
			n = -1 // not rendered yet ("–")
		}
		out[status] = n
	}
	return out
}

// shownDeadLetters returns the ids of the dead-letter rows the page shows.
func shownDeadLetters(t *testing.T, ctx context.Context) []string {
	t.Helper()
	return run(t, ctx, "read dead letters", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#deadletters tbody tr')].map(tr => tr.dataset.id)`))
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	// t.TempDir is removed after the test; to look at the pictures, set
	// HOURGLASS_TEST_SCREENSHOTS to a directory to copy them to.
	if dir := os.Getenv("HOURGLASS_TEST_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Errorf("copy screenshot: %v", err)
		}
	}
}

// TestDashboardInBrowser loads the dashboard in headless Chromium against a
// real server with real orders and webhook dead letters: the numbers shown
// match the API, the token from ?token= is used and dropped from the
// address, the dead-letters alert shows firing, the webhook delivery card
// shows the lag of the first attempts and the deferred fan-outs (none), and
// clicking a dead letter's Retry delivers it (the receiver was fixed) and
// shrinks the list. A second tab without the token gets the token form and
// works once it is entered.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	ctx, pageErrors := newBrowser(t)
	s := startServer(t)

	// A receiver that fails until it is fixed: its deliveries end in the
	// dead-letter list after the 2 quick retries.
	var fixed atomic.Bool
	delivered := make(chan string, 100)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			http.Error(w, "receiver broken", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		delivered <- string(body)
	}))
	t.Cleanup(recv.Close)
	var hook api.WebhookJSON
	_, err := s.Client.Do(t.Context(), http.MethodPost, "/v1/webhooks", nil,
		map[string]any{"url": recv.URL, "events": []string{"order.cancelled", "order.closed"}, "secret": "0123456789abcdef"}, &hook)
	if e, ok := err.(*api.Error); ok && e.Status == http.StatusNotFound {
		t.Skip("POST /v1/webhooks answers 404: the webhooks API is not wired into the server, so there are no dead letters to retry")
	}
	if err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	want := s.orderMix(t) // 1 cancelled + 2 closed orders: 3 events to the broken receiver
	wantTimers := s.timerMix(t)
	var dead api.DeadLetterListJSON
	testenv.Eventually(t, 20*time.Second, "3 dead letters", func() bool {
		if _, err := s.Client.Do(t.Context(), http.MethodGet, "/v1/deadletters", nil, nil, &dead); err != nil {
			t.Fatalf("list dead letters: %v", err)
		}
		return len(dead.DeadLetters) == 3
	})

	run(t, ctx, "open the dashboard", chromedp.Navigate(s.URL+"/?token="+s.Token))
	// The page polls every 2s; wait until it shows everything that exists.
	var shown map[string]int64
	testenv.Eventually(t, 20*time.Second, "the page shows the orders and 3 dead letters", func() bool {
		shown = shownCounts(t, ctx)
		return len(shownDeadLetters(t, ctx)) == 3 && shown["closed"] == want["closed"]
	})
	for _, st := range hourglass.States() {
		api := s.countByAPI(t, string(st))
		if shown[string(st)] != api || api != want[string(st)] {
			t.Errorf("page shows %d %s orders; GET /v1/orders?status=%s lists %d; made %d", shown[string(st)], st, st, api, want[string(st)])
		}
	}
	// The timers card, beside the orders: counts as GET /v1/timers lists
	// them, and the fire lateness over the 2 fires.
	testenv.Eventually(t, 10*time.Second, "the page shows the timers", func() bool {
		return shownTiles(t, ctx, "timers")["fired"] == wantTimers["fired"]
	})
	shownTimers := shownTiles(t, ctx, "timers")
	for _, st := range []string{"scheduled", "fired", "cancelled"} {
		if api := s.countTimersByAPI(t, st); shownTimers[st] != api || api != wantTimers[st] {
			t.Errorf("page shows %d %s timers; GET /v1/timers?status=%s lists %d; made %d", shownTimers[st], st, st, api, wantTimers[st])
		}
	}
	if p99 := run(t, ctx, "read timer lateness", chromedp.Evaluate[string](`document.getElementById('timer-lateness-p99').textContent`)); !strings.HasSuffix(p99, " over 2 fires") {
		t.Errorf("page shows timer fire lateness %q, want the p99 over 2 fires", p99)
	}
	// The webhook delivery card: the 3 first attempts of the last minute,
	// their lag, and no deferred fan-out (no burst), as GET /v1/dashboard.
	testenv.Eventually(t, 10*time.Second, "the page shows 3 first attempts", func() bool {
		return run(t, ctx, "read first attempts", chromedp.Evaluate[string](`document.getElementById('delivery-first-attempts').textContent`)) == "3"
	})
	snap := s.snapshot(t)
	if snap.DeliveryLag == nil || snap.DeliveryLag.Deliveries != 3 || snap.DeliveryLag.P50Seconds <= 0 || snap.DeliveryLag.P99Seconds < snap.DeliveryLag.P50Seconds ||
		snap.FanoutPending == nil || *snap.FanoutPending != 0 {
		t.Errorf("GET /v1/dashboard: delivery_lag %+v, fanout_pending %v; want 3 deliveries with a lag and 0 pending", snap.DeliveryLag, snap.FanoutPending)
	}
	webhooks := run(t, ctx, "read the webhook delivery card", chromedp.Evaluate[map[string]string](`Object.fromEntries(['delivery-lag-p50', 'delivery-lag-p99', 'fanout-pending'].map(id => [id, document.getElementById(id).textContent]))`))
	if webhooks["fanout-pending"] != "0" || !strings.HasSuffix(webhooks["delivery-lag-p50"], "s") || !strings.HasSuffix(webhooks["delivery-lag-p99"], "s") {
		t.Errorf("page shows the webhook delivery card %v, want a p50 and p99 lag and 0 batches awaiting fan-out", webhooks)
	}
	if overdue := run(t, ctx, "read overdue", chromedp.Evaluate[string](`document.getElementById('overdue').textContent`)); overdue != "0" {
		t.Errorf("page shows %q overdue orders, want 0", overdue)
	}
	// The nodes card: this server, owning every partition.
	testenv.Eventually(t, 10*time.Second, "the page shows this node owning every partition", func() bool {
		nodes := run(t, ctx, "read nodes", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#nodes tbody tr')].map(tr => tr.dataset.node + ' ' + tr.querySelector('td.parts').textContent)`))
		return len(nodes) == 1 && nodes[0] == "dash-node 64: 0-63"
	})
	if search := run(t, ctx, "read location", chromedp.Evaluate[string](`location.search`)); search != "" {
		t.Errorf("address bar still has %q: the token should be dropped from it", search)
	}
	// The dead-letters alert fires (3 > 0) and the page says so, as the API does.
	testenv.Eventually(t, 10*time.Second, "the page shows the dead_letters alert firing", func() bool {
		return run(t, ctx, "read alerts", chromedp.Evaluate[bool](`!!document.querySelector('#alerts li.firing[data-rule="dead_letters"]')`))
	})
	firing := run(t, ctx, "read firing alerts", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#alerts li.firing')].map(li => li.dataset.rule)`))
	var apiFiring []string
	for _, a := range s.snapshot(t).Alerts {
		if a.State == "firing" {
			apiFiring = append(apiFiring, a.Rule)
		}
	}
	if !slices.Equal(firing, apiFiring) {
		t.Errorf("page shows firing alerts %v, GET /v1/dashboard %v", firing, apiFiring)
	}
	screenshot(t, ctx, "dashboard.png")

	// Fix the receiver and retry one dead letter from the page.
	fixed.Store(true)
	rows := shownDeadLetters(t, ctx)
	target := rows[0]
	click(t, ctx, "click Retry", fmt.Sprintf(`#deadletters tbody tr[data-id="%s"] button.retry`, target))
	testenv.Eventually(t, 10*time.Second, "the retried dead letter leaves the list", func() bool {
		rows := shownDeadLetters(t, ctx)
		return len(rows) == 2 && !slices.Contains(rows, target)
	})
	select {
	case body := <-delivered:
		if !strings.Contains(body, `"type":"order.`) {
			t.Errorf("receiver got %s, want an order event", body)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the retried delivery never reached the fixed receiver")
	}
	if _, err := s.Client.Do(t.Context(), http.MethodGet, "/v1/deadletters", nil, nil, &dead); err != nil || len(dead.DeadLetters) != 2 {
		t.Errorf("after retry: GET /v1/deadletters has %d (%v), want 2", len(dead.DeadLetters), err)
	}
	screenshot(t, ctx, "dashboard-after-retry.png")

	// A tab without the token: the page asks for it, refuses a wrong one and
	// works with the right one.
	tab, closeTab := chromedp.NewContext(ctx)
	defer closeTab()
	run(t, tab, "open without a token", chromedp.Navigate(s.URL+"/"))
	formShown := func() bool {
		return run(t, tab, "read token form", chromedp.Evaluate[bool](`!document.getElementById('token-form').hidden && document.getElementById('main').hidden`))
	}
	testenv.Eventually(t, 10*time.Second, "token form shown", formShown)
	run(t, tab, "type a wrong token", chromedp.SendKeys(chromedp.CSS("#token-input"), "wrong-token"))
	click(t, tab, "click Connect", `#token-form button[type="submit"]`)
	testenv.Eventually(t, 10*time.Second, "wrong token refused", func() bool {
		return formShown() && run(t, tab, "read token error", chromedp.Evaluate[string](`document.getElementById('token-error').textContent`)) == "The token was refused."
	})
	run(t, tab, "type the token", chromedp.SendKeys(chromedp.CSS("#token-input"), s.Token))
	click(t, tab, "click Connect", `#token-form button[type="submit"]`)
	testenv.Eventually(t, 10*time.Second, "the page shows the orders after the token", func() bool {
		got := shownCounts(t, tab)
		return !formShown() && got["pending_payment"] == want["pending_payment"] && got["paid"] == want["paid"]
	})

	if errs := pageErrors(); len(errs) > 0 {
		t.Errorf("page errors:\n%s", strings.Join(errs, "\n"))
	}
}
