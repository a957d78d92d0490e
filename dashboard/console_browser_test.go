package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// eval runs a JavaScript expression in the page and returns its value.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return run(t, ctx, js, chromedp.Evaluate[T](js))
}

// openPage moves the console to hash and waits until that page has
// rendered (console.js stamps body.dataset.rendered after each render).
func openPage(t *testing.T, ctx context.Context, hash, page string) {
	t.Helper()
	run(t, ctx, "go to "+hash, chromedp.Evaluate[any](`location.hash = `+strconv.Quote(hash)+`; null`))
	testenv.Eventually(t, 15*time.Second, "the console renders "+hash, func() bool {
		return eval[bool](t, ctx, `document.body.dataset.page === `+strconv.Quote(page)+` && document.body.dataset.view === location.hash`)
	})
}

// waitRendered waits until page has rendered after the render stamped before.
func waitRendered(t *testing.T, ctx context.Context, page, before string) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, "the console renders "+page, func() bool {
		return eval[bool](t, ctx, `document.body.dataset.page === `+strconv.Quote(page)+
			` && (document.body.dataset.rendered || '') !== `+strconv.Quote(before))
	})
}

// rowIDs returns the data-id of each row of the console's list table.
func rowIDs(t *testing.T, ctx context.Context, table string) []string {
	t.Helper()
	return eval[[]string](t, ctx, `[...document.querySelectorAll('#`+table+` tbody tr')].map(tr => tr.dataset.id)`)
}

// newReceiver starts a webhook receiver that answers 503 until fixed is
// set, so deliveries end in the dead letters, and returns its address.
func newReceiver(t *testing.T, fixed *atomic.Bool) string {
	t.Helper()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			http.Error(w, "receiver broken", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(recv.Close)
	return recv.URL
}

// TestConsoleInBrowser drives the console in headless Chromium against a
// real server: lists with their filters in the address, the search box,
// an order's page, a timer's actions, a dead letter's retry, the local-time
// switch; and a viewer's token, which is shown no action and gets 403 when
// it tries one anyway.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	ctx, pageErrors := newBrowser(t)
	s := startServer(t)

	var fixed atomic.Bool
	recv := newReceiver(t, &fixed)
	var hook api.WebhookJSON
	if _, err := s.Client.Do(t.Context(), http.MethodPost, "/v1/webhooks", nil,
		map[string]any{"url": recv, "events": []string{"order.cancelled", "order.closed"}, "secret": "0123456789abcdef"}, &hook); err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	want := s.orderMix(t)
	s.timerMix(t)
	for _, key := range []string{"coupon:spring:1", "coupon:spring:2", "coupon:summer:1"} {
		if _, _, err := s.Client.ArmTimer(t.Context(), key, api.ArmTimerRequest{DelayMs: api.Delay(time.Hour)}); err != nil {
			t.Fatalf("arm timer %s: %v", key, err)
		}
	}
	var dead api.DeadLetterListJSON
	testenv.Eventually(t, 20*time.Second, "3 dead letters", func() bool {
		if _, err := s.Client.Do(t.Context(), http.MethodGet, "/v1/deadletters", nil, nil, &dead); err != nil {
			t.Fatalf("list dead letters: %v", err)
		}
		return len(dead.DeadLetters) == 3
	})

	// A list with its filter in the address: the closed orders, as the API
	// lists them.
	run(t, ctx, "open the console", chromedp.Navigate(s.URL+"/?token="+s.Token+"#/orders?status=closed"))
	waitRendered(t, ctx, "orders", "")
	shown := rowIDs(t, ctx, "orders-table")
	l, err := s.Client.ListOrders(t.Context(), "closed", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, o := range l.Orders {
		listed = append(listed, strconv.FormatInt(o.ID, 10))
	}
	if int64(len(shown)) != want["closed"] || !slices.Equal(shown, listed) {
		t.Errorf("console lists closed orders %v; the API %v; made %d", shown, listed, want["closed"])
	}
	if v := eval[string](t, ctx, `document.querySelector('#orders-filters select[name=status]').value`); v != "closed" {
		t.Errorf("status filter shows %q, want closed (from the address)", v)
	}
	// The filter form writes the address: paid orders of u1.
	run(t, ctx, "choose paid", chromedp.SetValue(chromedp.CSS(`#orders-filters select[name=status]`), "paid"))
	before := eval[string](t, ctx, `document.body.dataset.rendered`)
	click(t, ctx, "find", `#orders-filters button[type=submit]`)
	waitRendered(t, ctx, "orders", before)
	if h := eval[string](t, ctx, `location.hash`); h != "#/orders?status=paid" {
		t.Errorf("after Find the address is %q, want #/orders?status=paid", h)
	}
	if n := len(rowIDs(t, ctx, "orders-table")); int64(n) != want["paid"] {
		t.Errorf("console lists %d paid orders, want %d", n, want["paid"])
	}

	// The search box: an order id opens its page; times are in UTC until
	// the local-time switch is on.
	closedID := listed[0]
	before = eval[string](t, ctx, `document.body.dataset.rendered`)
	run(t, ctx, "search the order", chromedp.SendKeys(chromedp.CSS(`#search-input`), closedID+"\n"))
	waitRendered(t, ctx, "order", before)
	title := eval[string](t, ctx, `document.querySelector('#console h2').textContent`)
	if title != "Order "+closedID {
		t.Errorf("search for %s opened %q", closedID, title)
	}
	fieldsText := eval[string](t, ctx, `document.querySelector('#console table.fields').textContent`)
	if !strings.Contains(fieldsText, "closed") || !strings.Contains(fieldsText, " UTC") {
		t.Errorf("order page shows %q; want its status closed and times in UTC", fieldsText)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#order-actions button').length`); n != 0 {
		t.Errorf("a closed order's page offers %d actions, want none", n)
	}
	// Its timeline: the deadline beside the close, what closed it and on
	// which node, as GET /v1/orders/{id}/history says; its order.closed
	// delivery, dead after its three attempts, each one listed.
	var hist api.HistoryJSON
	if _, err := s.Client.Do(t.Context(), http.MethodGet, "/v1/orders/"+closedID+"/history", nil, nil, &hist); err != nil {
		t.Fatal(err)
	}
	timeline := eval[map[string]string](t, ctx, `Object.fromEntries(['scheduled', 'actual', 'lateness', 'closed-by', 'closed-node'].map(id => [id, document.getElementById(id).textContent]))`)
	if hist.Timing.ClosedBy == nil || hist.Timing.Node == nil || timeline["closed-by"] != *hist.Timing.ClosedBy || timeline["closed-node"] != "dash-node" ||
		*hist.Timing.Node != "dash-node" || !strings.HasSuffix(timeline["scheduled"], " UTC") || !strings.HasSuffix(timeline["actual"], " UTC") {
		t.Errorf("the order's timeline shows %v; the history says closed by %v on %v", timeline, hist.Timing.ClosedBy, hist.Timing.Node)
	}
	if by := timeline["closed-by"]; by != "deadline" && by != "sweeper" {
		t.Errorf("closed by %q, want the close path or the sweeper", by)
	}
	deliveries := eval[[]string](t, ctx, `[...document.querySelectorAll('#history-deliveries tbody tr')].map(tr => [...tr.cells].map(c => c.textContent).join(' | '))`)
	if len(deliveries) != 1 || !strings.Contains(deliveries[0], "order.closed | 1 | dead | 3 |") || strings.Count(deliveries[0], "HTTP 503") < 3 {
		t.Errorf("the order's deliveries show %q; want its order.closed dead letter with its 3 attempts, each HTTP 503", deliveries)
	}
	screenshot(t, ctx, "console-order.png")
	before = eval[string](t, ctx, `document.body.dataset.rendered`)
	click(t, ctx, "switch to local time", `#localtime`)
	waitRendered(t, ctx, "order", before)
	if text := eval[string](t, ctx, `document.querySelector('#console table.fields').textContent`); strings.Contains(text, " UTC") {
		t.Errorf("with local time on, the order page still shows UTC: %q", text)
	}
	click(t, ctx, "switch back to UTC", `#localtime`)

	// A pending order: cancel it from its page.
	pending, err := s.Client.ListOrders(t.Context(), "pending_payment", 100, 0)
	if err != nil || len(pending.Orders) == 0 {
		t.Fatalf("pending orders: %v %v", pending, err)
	}
	pid := pending.Orders[0].ID
	openPage(t, ctx, fmt.Sprintf("#/orders/%d", pid), "order")
	before = eval[string](t, ctx, `document.body.dataset.rendered`)
	run(t, ctx, "accept the confirm", chromedp.Evaluate[any](`window.confirm = () => true; null`))
	click(t, ctx, "click Cancel order", `#order-actions button.cancel`)
	waitRendered(t, ctx, "order", before)
	testenv.Eventually(t, 10*time.Second, "the order is cancelled", func() bool {
		o, err := s.Client.Order(t.Context(), pid)
		return err == nil && o.Status == "cancelled"
	})

	// A timer prefix search lists the timers under it; a whole key opens
	// the timer's page (a key with a colon is not taken for source:key when
	// no source has that name), where a scheduled timer is cancelled.
	before = eval[string](t, ctx, `document.body.dataset.rendered`)
	run(t, ctx, "clear the search", chromedp.Evaluate[any](`document.getElementById('search-input').value = ''; null`))
	run(t, ctx, "search a prefix", chromedp.SendKeys(chromedp.CSS(`#search-input`), "coupon:spring:*\n"))
	waitRendered(t, ctx, "timers", before)
	if keys := rowIDs(t, ctx, "timers-table"); !slices.Equal(keys, []string{"coupon:spring:1", "coupon:spring:2"}) {
		t.Errorf("prefix search coupon:spring:* lists %v", keys)
	}
	before = eval[string](t, ctx, `document.body.dataset.rendered`)
	run(t, ctx, "clear the search", chromedp.Evaluate[any](`document.getElementById('search-input').value = ''; null`))
	run(t, ctx, "search a key", chromedp.SendKeys(chromedp.CSS(`#search-input`), "coupon:spring:2\n"))
	waitRendered(t, ctx, "timer", before)
	if h := eval[string](t, ctx, `location.hash`); h != "#/timers/coupon%3Aspring%3A2" {
		t.Errorf("search for a timer key went to %q", h)
	}
	before = eval[string](t, ctx, `document.body.dataset.rendered`)
	click(t, ctx, "click Cancel timer", `#timer-actions button.cancel`)
	waitRendered(t, ctx, "timer", before)
	testenv.Eventually(t, 10*time.Second, "the timer is cancelled", func() bool {
		tm, err := s.Client.Timer(t.Context(), "coupon:spring:2")
		return err == nil && tm.Status == "cancelled"
	})

	// Dead letters: retry one from its row once the receiver is fixed.
	openPage(t, ctx, "#/deadletters", "deadletters")
	// 3 from the order mix and 1 from the cancel above, newest first.
	testenv.Eventually(t, 20*time.Second, "4 dead letters", func() bool {
		if _, err := s.Client.Do(t.Context(), http.MethodGet, "/v1/deadletters", nil, nil, &dead); err != nil {
			t.Fatalf("list dead letters: %v", err)
		}
		return len(dead.DeadLetters) == 4
	})
	openPage(t, ctx, "#/deadletters?live=0", "deadletters")
	rows := rowIDs(t, ctx, "deadletters-table")
	var deadIDs []string
	for _, d := range dead.DeadLetters {
		deadIDs = append(deadIDs, strconv.FormatInt(d.ID, 10))
	}
	if !slices.Equal(rows, deadIDs) {
		t.Fatalf("console lists dead letters %v, the API %v", rows, deadIDs)
	}
	fixed.Store(true)
	before = eval[string](t, ctx, `document.body.dataset.rendered`)
	click(t, ctx, "click Retry", fmt.Sprintf(`#deadletters-table tr[data-id="%s"] button.retry`, rows[0]))
	waitRendered(t, ctx, "deadletters", before)
	if got := rowIDs(t, ctx, "deadletters-table"); len(got) != 3 || slices.Contains(got, rows[0]) {
		t.Errorf("after Retry the console lists %v; want the 3 others", got)
	}
	screenshot(t, ctx, "console-deadletters.png")

	// A viewer: the same pages without a single action, and a write sent
	// anyway is refused.
	viewer, closeViewer := chromedp.NewContext(ctx)
	defer closeViewer()
	run(t, viewer, "open as a viewer", chromedp.Navigate(s.URL+"/?token="+testViewerToken+"#/deadletters"))
	waitRendered(t, viewer, "deadletters", "")
	if role := eval[string](t, viewer, `document.body.dataset.role`); role != "viewer" {
		t.Errorf("viewer's page has role %q", role)
	}
	if n := eval[int](t, viewer, `document.querySelectorAll('#console button:not([type=submit]), #console input[type=checkbox].select, #bulkbar').length`); n != 0 {
		t.Errorf("the viewer's dead-letter list shows %d buttons or selections, want none", n)
	}
	openPage(t, viewer, "#/timers?status=scheduled", "timers")
	if n := eval[int](t, viewer, `document.querySelectorAll('#console button:not([type=submit])').length`); n != 0 {
		t.Errorf("the viewer's timer list shows %d action buttons, want none", n)
	}
	openPage(t, viewer, "#/timers/coupon:summer:1", "timer")
	if n := eval[int](t, viewer, `document.querySelectorAll('#timer-actions button').length`); n != 0 {
		t.Errorf("the viewer's timer page shows %d actions, want none", n)
	}
	run(t, ctx, "open the dashboard as the operator", chromedp.Navigate(s.URL+"/#/"))
	testenv.Eventually(t, 10*time.Second, "the operator's dashboard shows Retry", func() bool {
		return eval[int](t, ctx, `document.querySelectorAll('#deadletters button.retry').length`) == 3
	})
	run(t, viewer, "open the dashboard as a viewer", chromedp.Navigate(s.URL+"/#/"))
	testenv.Eventually(t, 10*time.Second, "the viewer's dashboard lists the dead letters", func() bool {
		return eval[int](t, viewer, `document.querySelectorAll('#deadletters tbody tr').length`) == 3
	})
	if n := eval[int](t, viewer, `document.querySelectorAll('#deadletters button.retry').length`); n != 0 {
		t.Errorf("the viewer's dashboard shows %d Retry buttons, want none", n)
	}
	status := run(t, viewer, "retry as a viewer", chromedp.Evaluate[float64](`window.hourglass.api('POST', '/v1/deadletters/`+rows[1]+`/retry').then(r => r.status)`, chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden {
		t.Errorf("a viewer's retry from the page: %v, want 403", status)
	}
	screenshot(t, viewer, "console-viewer.png")

	// A filtered bulk retry from the operator's dead-letter list: asked for
	// a reason (and no rate), it opens the action's page, which follows it
	// to done; the list is then empty and the receiver got each event.
	openPage(t, ctx, "#/deadletters", "deadletters")
	run(t, ctx, "answer the prompts", chromedp.Evaluate[any](`window.prompt = (q) => q.startsWith('Retry') ? 'receiver back' : ''; null`))
	click(t, ctx, "click Retry all matching", `#bulkbar button.bulk-all.retry_deadletters`)
	testenv.Eventually(t, 30*time.Second, "the bulk action's page shows it done", func() bool {
		return eval[bool](t, ctx, `document.body.dataset.page === 'bulk-action' && document.getElementById('bulk-state').textContent === 'done'`)
	})
	if done := eval[string](t, ctx, `document.getElementById('bulk-done').textContent`); done != "3" {
		t.Errorf("the bulk retry's page shows %s done, want 3", done)
	}
	if back := eval[string](t, ctx, `[...document.querySelectorAll('#console a')].map(a => a.textContent).join()`); back != "all bulk actions" {
		t.Errorf("the bulk action's page links %q, want its way back to the list", back)
	}
	screenshot(t, ctx, "console-bulk.png")
	testenv.Eventually(t, 20*time.Second, "no dead letters left", func() bool {
		_, err := s.Client.Do(t.Context(), http.MethodGet, "/v1/deadletters", nil, nil, &dead)
		return err == nil && len(dead.DeadLetters) == 0
	})
	openPage(t, ctx, "#/bulk", "bulk")
	if rows := eval[int](t, ctx, `document.querySelectorAll('#bulk-table tbody tr').length`); rows != 1 {
		t.Errorf("the bulk actions list shows %d, want the one retry", rows)
	}

	if errs := pageErrors(); len(errs) > 0 {
		t.Errorf("page errors:\n%s", strings.Join(errs, "\n"))
	}
}
