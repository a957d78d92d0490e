package source_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
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
			checker, err := beforeclose.New(beforeclose.Config{Secret: secret, Timeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			check := source.PaymentCheck{Checker: checker, Clock: hourglass.SystemClock{}, Logger: slog.Default()}
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
			if _, ok := checker.FailingSince(); !ok {
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
			checker, err := beforeclose.New(beforeclose.Config{})
			if err != nil {
				t.Fatal(err)
			}
			src := shop.Source("shop_orders")
			src.BeforeClose, src.BeforeCloseOnError, src.BeforeCloseMaxFailures = rcv.URL, "close", 3
			runWith(t, source.Config{Store: db, Sources: []hourglass.Source{src},
				Checker: source.PaymentCheck{Checker: checker, Clock: hourglass.SystemClock{}, Logger: slog.Default()}})
			id := shop.Order(t, "u", 200*time.Millisecond, "A", 1)
			testenv.Eventually(t, 10*time.Second, "the row closed after 3 failed checks", func() bool { return shop.Status(t, id) == "CLOSED" })
		})
	}
}
