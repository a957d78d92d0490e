package webhook_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/webhook"
)

var _ webhook.LagObserver = (*counter)(nil)

// WebhookDeliveryLag makes the test observer a webhook.LagObserver: it
// counts first attempts under "lag" and keeps the largest lag, in ms, under
// "lag_max_ms".
func (c *counter) WebhookDeliveryLag(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n["lag"]++
	c.n["lag_max_ms"] = max(c.n["lag_max_ms"], int(d.Milliseconds()))
}

// TestDeliveryLag: the observer is told the lag of each delivery's first
// attempt, from its event's commit, once: not again at the retries.
func TestDeliveryLag(t *testing.T) {
	t.Parallel()
	f := setup(t, webhook.Config{})
	rc := newReceiver(t)
	rc.setRespond(failFirst(2, http.StatusInternalServerError, http.StatusNoContent))
	f.subscribe(t, rc, hourglass.EventOrderCreated)
	before := time.Now()
	o := f.order(t)
	ev := f.eventIDs(t, o.ID)[0]
	rc.waitFor("the third attempt", func() bool { return len(rc.of(ev)) >= 3 })
	waitCounts(t, f, 0, 0)
	got := f.obs.get()
	if got["lag"] != 1 {
		t.Fatalf("lag observed %d times over 3 attempts of one delivery, want once", got["lag"])
	}
	if bound := time.Since(before).Milliseconds(); got["lag_max_ms"] < 0 || int64(got["lag_max_ms"]) > bound {
		t.Fatalf("lag %d ms, want 0..%d ms", got["lag_max_ms"], bound)
	}
}
