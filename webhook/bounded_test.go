package webhook_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/webhook"
)

// gatedReceiver answers 200 once open is closed; until then every request
// waits (or ends when its client gives up).
type gatedReceiver struct {
	srv      *httptest.Server
	open     chan struct{}
	inFlight atomic.Int64
	got      sync.Map // event id → true
}

func newGatedReceiver(t *testing.T) *gatedReceiver {
	t.Helper()
	g := &gatedReceiver{open: make(chan struct{})}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.inFlight.Add(1)
		defer g.inFlight.Add(-1)
		select {
		case <-g.open:
			g.got.Store(r.Header.Get(webhook.EventIDHeader), true)
		case <-r.Context().Done():
			return
		}
	}))
	t.Cleanup(func() {
		g.release()
		g.srv.Close()
	})
	return g
}

var releaseOnce sync.Map

func (g *gatedReceiver) release() {
	once, _ := releaseOnce.LoadOrStore(g, &sync.Once{})
	once.(*sync.Once).Do(func() { close(g.open) })
}

// backlog stops f's service, subscribes a webhook to g directly in the
// store and creates n orders: n due deliveries waiting for the next start.
func (f *fixture) backlog(t *testing.T, g *gatedReceiver, n int) {
	t.Helper()
	f.stop()
	if _, err := f.store.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: g.srv.URL + "/hook", Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: secret}, 100); err != nil {
		t.Fatal(err)
	}
	for range n {
		f.order(t)
	}
}

// TestHeldInMemoryIsBounded: with more deliveries due than MaxHeld, at most
// MaxHeld are held in memory at any time (issue 11: 3.95 M due deliveries
// took 600 MB after a restart), and all are delivered as they drain.
func TestHeldInMemoryIsBounded(t *testing.T) {
	t.Parallel()
	const n, maxHeld = 300, 40
	f := setup(t, webhook.Config{})
	g := newGatedReceiver(t)
	f.backlog(t, g, n)
	cs := &scanCountingStore{}
	f.wrap = func(s webhook.Store) webhook.Store { cs.Store = s; return cs }
	f.start(t, webhook.Config{MaxHeld: maxHeld, Workers: 8, LoadInterval: 50 * time.Millisecond, Window: time.Second})

	peak := 0
	sample := func() {
		if p := f.svc.Pending(); p > peak {
			peak = p
		}
	}
	// Several load intervals (and polls, 50 ms each) with nothing draining:
	// twenty reads of due deliveries, about 500 ms.
	testenv.Eventually(t, 30*time.Second, "twenty reads of due deliveries", func() bool {
		sample()
		return cs.scans.Load() >= 20
	})
	if peak > maxHeld {
		t.Fatalf("%d deliveries held with MaxHeld %d", peak, maxHeld)
	}
	if peak < maxHeld-8 { // the workers hold up to 8 in flight, outside Pending
		t.Errorf("only %d deliveries held with %d due and MaxHeld %d", peak, n, maxHeld)
	}
	g.release()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("all %d delivered", n), func() bool {
		sample()
		pending, _ := f.counts(t)
		return pending == 0
	})
	if peak > maxHeld {
		t.Errorf("%d deliveries held while draining, MaxHeld %d", peak, maxHeld)
	}
	count := 0
	g.got.Range(func(any, any) bool { count++; return true })
	if count != n {
		t.Errorf("%d events delivered, want %d", count, n)
	}
}

// TestShutdownWithDeliveriesInFlight: Run returns promptly when its context
// ends, with every worker waiting on a receiver that does not answer and a
// backlog behind them (issue 11: a 29 s shutdown against a 10 s grace).
func TestShutdownWithDeliveriesInFlight(t *testing.T) {
	t.Parallel()
	f := setup(t, webhook.Config{})
	g := newGatedReceiver(t)
	f.backlog(t, g, 200)
	f.start(t, webhook.Config{Workers: 16, Timeout: time.Minute})
	testenv.Eventually(t, 10*time.Second, "16 requests in flight", func() bool { return g.inFlight.Load() >= 16 })

	start := time.Now()
	f.stop()
	if took := time.Since(start); took > time.Second {
		t.Errorf("Run took %s to return after its context ended, with 16 deliveries in flight", took)
	}
	if pending, _ := f.counts(t); pending != 200 {
		t.Errorf("%d pending after the stop, want 200 (in-flight attempts are not recorded)", pending)
	}
}
