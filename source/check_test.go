package source_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/source"
	"github.com/hourglass/hourglass/webhook"
)

// TestPaymentCheck: a source with before_close asks the payment provider
// before each close, signed like a webhook. close closes the row; paid
// leaves it to the shop's pay path; extend closes it at the new deadline,
// not the old; a provider that times out leaves the row pending past its
// deadline and the sweeper's grace (never closed blind), and the
// before_close_failures source reports it; with before_close_on_error:
// close, such a row is closed after before_close_max_failures failures.
func TestPaymentCheck(t *testing.T) {
	const secret = "payment-check-secret-0123456789"
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 100)
			var (
				mu      sync.Mutex
				answers = map[int64]string{}
				asked   = map[int64]int{}
			)
			rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), secret, body, time.Now(), time.Minute); err != nil {
					t.Errorf("check not signed: %v", err)
				}
				var req struct {
					Source   string `json:"source"`
					Key      int64  `json:"key"`
					Deadline string `json:"deadline"`
				}
				if err := json.Unmarshal(body, &req); err != nil || req.Source != "shop_orders" || req.Deadline == "" {
					t.Errorf("check body %s: %v", body, err)
				}
				mu.Lock()
				a := answers[req.Key]
				asked[req.Key]++
				if a == "extend" && asked[req.Key] > 1 {
					a = "close" // asked again at the new deadline
				}
				mu.Unlock()
				switch a {
				case "timeout":
					select {
					case <-r.Context().Done():
					case <-time.After(2 * time.Second):
					}
					return
				case "extend":
					fmt.Fprintf(w, `{"action":"extend","deadline":%q}`, time.Now().Add(1500*time.Millisecond).UTC().Format(hourglass.TimeFormat))
				case "paid":
					fmt.Fprint(w, `{"action":"paid","payment_id":"pay_1"}`)
				default:
					fmt.Fprint(w, `{"action":"close"}`)
				}
			}))
			t.Cleanup(rcv.Close)
			gate, err := beforeclose.NewGate(beforeclose.GateConfig{Checker: beforeclose.Config{Secret: secret, Timeout: 300 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			check := source.PaymentCheck{Gate: gate}
			src := shop.Source("shop_orders")
			src.BeforeClose = rcv.URL
			runWith(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: &observer{}, Checker: check,
				SweepInterval: 200 * time.Millisecond, SweepGrace: 300 * time.Millisecond})

			ids := map[string]int64{}
			start := time.Now()
			for _, a := range []string{"close", "paid", "extend", "timeout"} {
				id := shop.Order(t, "u", 500*time.Millisecond, "A", 1)
				mu.Lock()
				answers[id] = a
				mu.Unlock()
				ids[a] = id
			}
			testenv.Eventually(t, 10*time.Second, "the close and extend answers closed their rows", func() bool {
				return shop.Status(t, ids["close"]) == "CLOSED" && shop.Status(t, ids["extend"]) == "CLOSED"
			})
			if took := time.Since(start); took < 2*time.Second {
				t.Errorf("the extended row closed %s after its creation; want after its new deadline (about 2 s)", took)
			}
			testenv.Phase(t, time.Until(start.Add(3*time.Second)), "past the deadline, the grace and several retries of the failing check")
			if st := shop.Status(t, ids["paid"]); st != "UNPAID" {
				t.Errorf("the row the provider said was paid is %s; want it left to the shop's pay path", st)
			}
			if st := shop.Status(t, ids["timeout"]); st != "UNPAID" {
				t.Errorf("the row whose check times out is %s; want it pending (never closed blind)", st)
			}
			mu.Lock()
			n := asked[ids["timeout"]]
			mu.Unlock()
			if n < 3 {
				t.Errorf("the failing check was asked %d times in 2.5 s; want retries with backoff", n)
			}
			if _, ok := gate.FailingSince(); !ok {
				t.Error("the checker reports no ongoing failure for the before_close_failures alert")
			}
		})
	}
}

// TestPaymentCheckOnErrorClose: before_close_on_error: close closes a row
// whose check failed before_close_max_failures times in a row.
func TestPaymentCheckOnErrorClose(t *testing.T) {
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 100)
			rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
			t.Cleanup(rcv.Close)
			gate, err := beforeclose.NewGate(beforeclose.GateConfig{})
			if err != nil {
				t.Fatal(err)
			}
			src := shop.Source("shop_orders")
			src.BeforeClose, src.BeforeCloseOnError, src.BeforeCloseMaxFailures = rcv.URL, "close", 3
			runWith(t, source.Config{Store: db, Sources: []hourglass.Source{src},
				Checker: source.PaymentCheck{Gate: gate}})
			id := shop.Order(t, "u", 200*time.Millisecond, "A", 1)
			testenv.Eventually(t, 10*time.Second, "the row closed after 3 failed checks", func() bool { return shop.Status(t, id) == "CLOSED" })
		})
	}
}

// askedChecker records the rows the runner asks about (the deadline each
// carries) before handing them to the real PaymentCheck.
type askedChecker struct {
	source.PaymentCheck
	mu    sync.Mutex
	asked map[int64][]time.Time
}

func (c *askedChecker) Check(ctx context.Context, src hourglass.Source, row hourglass.DueItem) (hourglass.CloseCause, time.Time) {
	c.mu.Lock()
	c.asked[row.ID] = append(c.asked[row.ID], row.At)
	c.mu.Unlock()
	return c.PaymentCheck.Check(ctx, src, row)
}

func (c *askedChecker) rows(id int64) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.asked[id])
}

// TestPaymentCheckExtendBounded: an extend to a deadline in the past is a
// failed check, retried with backoff, and one to a moment from now is
// asked again no sooner than the checker's step: each row is asked a
// handful of times in 3 s, not thousands (9,376 POSTs in 9 s before).
// A row extended again and again is asked each time with its first
// deadline (the shop's), from which the 7-day cap counts
// (TestPaymentCheckCap), not with its previous extension's.
func TestPaymentCheckExtendBounded(t *testing.T) {
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 100)
			var (
				mu      sync.Mutex
				answers = map[int64]string{}
				calls   = map[int64]int{}
			)
			rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					Key int64 `json:"key"`
				}
				body, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(body, &req)
				mu.Lock()
				a := answers[req.Key]
				calls[req.Key]++
				mu.Unlock()
				at := time.Now().Add(-time.Second) // "past"
				switch a {
				case "moment":
					at = time.Now().Add(time.Millisecond)
				case "later":
					at = time.Now().Add(300 * time.Millisecond)
				}
				fmt.Fprintf(w, `{"action":"extend","deadline":%q}`, at.UTC().Format(hourglass.TimeFormat))
			}))
			t.Cleanup(rcv.Close)
			gate, err := beforeclose.NewGate(beforeclose.GateConfig{Checker: beforeclose.Config{Logger: slog.New(slog.DiscardHandler)}})
			if err != nil {
				t.Fatal(err)
			}
			check := &askedChecker{PaymentCheck: source.PaymentCheck{Gate: gate}, asked: map[int64][]time.Time{}}
			src := shop.Source("shop_orders")
			src.BeforeClose = rcv.URL
			runWith(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: &observer{}, Checker: check,
				SweepInterval: 200 * time.Millisecond, SweepGrace: 300 * time.Millisecond})
			ids := map[string]int64{}
			for _, a := range []string{"past", "moment", "later"} {
				id := shop.Order(t, "u", 300*time.Millisecond, "A", 1)
				mu.Lock()
				answers[id] = a
				mu.Unlock()
				ids[a] = id
			}
			start := time.Now()
			testenv.Eventually(t, 10*time.Second, "every row asked", func() bool {
				return len(check.rows(ids["past"])) > 0 && len(check.rows(ids["moment"])) > 0 && len(check.rows(ids["later"])) > 0
			})
			testenv.Phase(t, time.Until(start.Add(3*time.Second)), "3 s of checks")
			mu.Lock()
			defer mu.Unlock()
			for _, a := range []string{"past", "moment"} {
				if n := calls[ids[a]]; n < 2 || n > 12 {
					t.Errorf("the row answered extend (%s) was asked %d times in about 3 s; want a few, spaced by the backoff", a, n)
				}
			}
			asked := check.rows(ids["later"])
			if len(asked) < 3 {
				t.Fatalf("the row extended by 300 ms each time was asked %d times in 3 s; want several", len(asked))
			}
			for i, at := range asked {
				if !at.Equal(asked[0]) {
					t.Errorf("check %d of the extended row carried deadline %s; want its first deadline %s each time", i+1, at, asked[0])
				}
			}
			for _, id := range ids {
				if st := shop.Status(t, id); st != "UNPAID" {
					t.Errorf("row %d is %s; want pending while its checks extend it", id, st)
				}
			}
		})
	}
}

// TestPaymentCheckCap: an extend is capped at 7 days after the deadline
// the row is asked with (its first, TestPaymentCheckExtendBounded); once
// that has passed, an extend (capped at it) is a failed check, retried
// with backoff, and closes the row with before_close_on_error: close.
func TestPaymentCheckCap(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	first := hourglasstest.Epoch
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"action":"extend","deadline":%q}`, clock.Now().Add(30*24*time.Hour).UTC().Format(hourglass.TimeFormat))
	}))
	t.Cleanup(rcv.Close)
	gate, err := beforeclose.NewGate(beforeclose.GateConfig{Checker: beforeclose.Config{Clock: clock, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	check := source.PaymentCheck{Gate: gate}
	src := hourglass.Source{Name: "s", BeforeClose: rcv.URL, BeforeCloseOnError: "close", BeforeCloseMaxFailures: 2}
	row := hourglass.DueItem{ID: 1, At: first}
	cap := first.Add(beforeclose.MaxExtension)
	if cause, at := check.Check(t.Context(), src, row); cause != "" || !at.Equal(cap) {
		t.Fatalf("Check = %q, %s; want extended to the cap %s", cause, at, cap)
	}
	clock.Set(cap)
	cause, at := check.Check(t.Context(), src, row)
	if cause != "" || !at.Equal(cap.Add(beforeclose.RetryMin)) {
		t.Fatalf("Check at the cap = %q, %s; want a failed check retried in %s", cause, at, beforeclose.RetryMin)
	}
	clock.Set(at)
	if cause, _ := check.Check(t.Context(), src, row); cause != hourglass.CauseCheckFailed {
		t.Fatalf("the second failure in a row: Check = %q, want %q (before_close_max_failures 2, on error: close)", cause, hourglass.CauseCheckFailed)
	}
}
