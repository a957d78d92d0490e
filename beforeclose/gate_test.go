package beforeclose_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestGateVerdicts: the answer policy orders and sources share. close
// closes; paid does not; extend arms again at its deadline, or at the
// Checker's step when that is later; a failure is retried after the
// backoff, or with OnErrorClose closes after MaxFailures in a row; an
// answer Apply refuses is a failure.
func TestGateVerdicts(t *testing.T) {
	t.Parallel()
	now := hourglasstest.Epoch
	refuse := func(context.Context, beforeclose.Answer) error { return errors.New("refused") }
	tests := []struct {
		name    string
		status  int
		answer  string
		policy  beforeclose.Policy
		apply   func(context.Context, beforeclose.Answer) error
		checks  int // asked this many times; the last Verdict is checked
		close   bool
		retryAt time.Time
		failed  bool
	}{
		{name: "close", status: 200, answer: `{"action":"close"}`, checks: 1, close: true},
		{name: "paid", status: 200, answer: `{"action":"paid","payment_id":"p1"}`, checks: 1},
		{name: "extend", status: 200, answer: fmt.Sprintf(`{"action":"extend","deadline":%q}`, now.Add(time.Minute).Format(time.RFC3339Nano)),
			checks: 1, retryAt: now.Add(time.Minute)},
		{name: "extend to a moment waits a step", status: 200, answer: fmt.Sprintf(`{"action":"extend","deadline":%q}`, now.Add(time.Millisecond).Format(time.RFC3339Nano)),
			checks: 1, retryAt: now.Add(beforeclose.RetryMin)},
		{name: "failure retried", status: 500, answer: "down", checks: 1, retryAt: now.Add(beforeclose.RetryMin), failed: true},
		{name: "failures back off", status: 500, answer: "down", checks: 3, retryAt: now.Add(4 * beforeclose.RetryMin), failed: true},
		{name: "on error close", status: 500, answer: "down", policy: beforeclose.Policy{OnError: beforeclose.OnErrorClose, MaxFailures: 2},
			checks: 2, close: true, failed: true},
		{name: "on error close, too few", status: 500, answer: "down", policy: beforeclose.Policy{OnError: beforeclose.OnErrorClose, MaxFailures: 3},
			checks: 2, retryAt: now.Add(2 * beforeclose.RetryMin), failed: true},
		{name: "refused answer", status: 200, answer: `{"action":"paid","payment_id":"p1"}`, apply: refuse, checks: 1, retryAt: now.Add(beforeclose.RetryMin), failed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.answer)
			}))
			t.Cleanup(srv.Close)
			clock := hourglasstest.NewClock(now)
			g, err := beforeclose.NewGate(beforeclose.GateConfig{Checker: beforeclose.Config{Clock: clock, Logger: slog.New(slog.DiscardHandler)}})
			if err != nil {
				t.Fatal(err)
			}
			var v beforeclose.Verdict
			for range tt.checks {
				v = g.Check(t.Context(), beforeclose.Request{Key: "k", URL: srv.URL, Body: []byte(`{}`), Policy: tt.policy, Apply: tt.apply, Subject: "row"})
			}
			if v.Close != tt.close || !v.RetryAt.Equal(tt.retryAt) || (v.Err != nil) != tt.failed {
				t.Errorf("Verdict = close %t, retry at %s, err %v; want close %t, retry at %s, failed %t",
					v.Close, v.RetryAt.Format(hourglass.TimeFormat), v.Err, tt.close, tt.retryAt.Format(hourglass.TimeFormat), tt.failed)
			}
		})
	}
}
