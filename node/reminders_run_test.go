package node_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/node/nodetest"
)

// The reminder runs of issue 41's "Must show", on the developer's store
// (HOURGLASS_TEST_STORE) with the default mechanism, in the Full tier:
//
//	HOURGLASS_TEST_TIER=full HOURGLASS_TEST_STORE=postgres go test -run TestReminderRun -v ./node/

// remindRun is one node and what a run created on it.
type remindRun struct {
	t  *testing.T
	db hourglass.Database

	mu     sync.Mutex
	orders map[int64]hourglass.Order // as created (RemindAt set when reminded)
	paid   map[int64]bool
}

func newRemindRun(t *testing.T) *remindRun {
	testenv.Require(t, testenv.Full)
	n := nodetest.Start(t, node.Config{})
	if _, err := n.Store.PutProduct(t.Context(), hourglass.Product{SKU: "R", Name: "R", Available: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	return &remindRun{t: t, db: n.Store, orders: map[int64]hourglass.Order{}, paid: map[int64]bool{}}
}

// create creates n orders with 32 workers, order i not before at(i), with
// params(i); pay says which to pay at once.
func (r *remindRun) create(n int, at func(i int) time.Time, params func(i int) hourglass.CreateOrderParams, pay func(i int) bool) {
	t, ctx := r.t, r.t.Context()
	var (
		next, errs atomic.Int64
		wg         sync.WaitGroup
	)
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if d := time.Until(at(i)); d > 0 {
					time.Sleep(d)
				}
				p := params(i)
				p.UserID, p.Items = fmt.Sprint("u", i), []hourglass.Item{{SKU: "R", Quantity: 1}}
				o, _, err := r.db.CreateOrder(ctx, p)
				if err == nil && pay(i) {
					_, err = r.db.PayOrder(ctx, o.ID, fmt.Sprint("pay-", i))
				}
				if err != nil {
					if errs.Add(1) == 1 {
						t.Errorf("order %d: %v", i, err)
					}
					continue
				}
				r.mu.Lock()
				r.orders[o.ID] = o
				r.paid[o.ID] = pay(i)
				r.mu.Unlock()
			}
		})
	}
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d creates or payments failed", errs.Load())
	}
}

// settle waits until no order is pending.
func (r *remindRun) settle(limit time.Duration) {
	testenv.Eventually(r.t, limit, "no order pending", func() bool {
		n, err := r.db.CountPendingDue(r.t.Context(), time.Now().Add(time.Hour), 0)
		if err != nil {
			r.t.Fatal(err)
		}
		return n == 0
	})
}

// lateness reads every event and returns, in ms, each reminder's lateness
// (order.expiring's created_at − remind_at) and each close's (closed_at −
// deadline), checking that no reminder is early, at or after its
// deadline, twice, or for a paid order, and none missing.
// With reminderOnly, only the closes of orders without a reminder count.
func (r *remindRun) lateness(reminderOnly bool) (remind, closes []int64, lastRemind time.Time) {
	t := r.t
	expiring := map[int64]int{}
	for after := int64(0); ; {
		page, err := r.db.Events(t.Context(), hourglass.EventPage{After: after, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			after = e.Seq
			o, ok := r.orders[e.OrderID]
			if !ok {
				continue
			}
			switch e.Type {
			case hourglass.EventOrderExpiring:
				expiring[o.ID]++
				if e.CreatedAt.Before(o.RemindAt) || !e.CreatedAt.Before(o.Deadline) || r.paid[o.ID] {
					t.Errorf("order %d (paid %v): order.expiring at %s; remind_at %s, deadline %s", o.ID, r.paid[o.ID], e.CreatedAt, o.RemindAt, o.Deadline)
				}
				remind = append(remind, e.CreatedAt.Sub(o.RemindAt).Milliseconds())
				if e.CreatedAt.After(lastRemind) {
					lastRemind = e.CreatedAt
				}
			case hourglass.EventOrderClosed:
				if o.RemindAt.IsZero() || !reminderOnly {
					closes = append(closes, e.CreatedAt.Sub(o.Deadline).Milliseconds())
				}
			}
		}
	}
	missing, twice := 0, 0
	for id, o := range r.orders {
		switch n := expiring[id]; {
		case n > 1:
			twice++
		case n == 0 && !r.paid[id] && !o.RemindAt.IsZero():
			missing++
		}
	}
	if missing > 0 || twice > 0 {
		t.Errorf("%d reminders missing, %d sent twice", missing, twice)
	}
	return remind, closes, lastRemind
}

// quantiles formats p50, p99 and max of ms.
func quantiles(ms []int64) string {
	if len(ms) == 0 {
		return "none"
	}
	slices.Sort(ms)
	q := func(p float64) int64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	return fmt.Sprintf("p50 %d ms, p99 %d ms, max %d ms (n=%d)", q(0.5), q(0.99), ms[len(ms)-1], len(ms))
}

// TestReminderRunLateness: 2,000 orders a second for 10 s, 4 s timeouts
// reminded 2 s ahead (half the timeout), 20 % paid at once: reminder
// lateness p50/p99/max beside the closes', none early, none for a paid
// order.
func TestReminderRunLateness(t *testing.T) {
	r := newRemindRun(t)
	const rate, seconds = 2000, 10
	start := time.Now().Add(100 * time.Millisecond)
	r.create(rate*seconds, func(i int) time.Time { return start.Add(time.Duration(i) * time.Second / rate) },
		func(int) hourglass.CreateOrderParams {
			return hourglass.CreateOrderParams{Timeout: 4 * time.Second, RemindBefore: 2 * time.Second}
		}, func(i int) bool { return i%5 == 0 })
	if took := time.Since(start); took > seconds*time.Second+time.Second {
		t.Logf("the creates fell behind: %s for %d s of load", took.Round(time.Millisecond), seconds)
	}
	r.settle(60 * time.Second)
	remind, closes, _ := r.lateness(false)
	t.Logf("store %s: reminders %s; closes %s", testenv.Store(t, "sqlite"), quantiles(remind), quantiles(closes))
}

// TestReminderRunBurst: 100,000 reminders due in the same millisecond T,
// and 5,000 orders without one closing over [T, T+1 s): every reminder
// sent within 3 s of T, with the closes' lateness printed beside.
func TestReminderRunBurst(t *testing.T) {
	r := newRemindRun(t)
	const burst, others = 100000, 5000
	const lead = 30 * time.Second
	start := time.Now()
	T := hourglass.FromUnixMilli(hourglass.UnixMilli(start.Add(90 * time.Second)))
	r.create(burst+others, func(int) time.Time { return time.Time{} }, func(i int) hourglass.CreateOrderParams {
		now := time.Now()
		if i < burst {
			// Reminded at T: deadline T + lead (the create's now is within
			// a few ms of this one's; the check below uses the stored one).
			return hourglass.CreateOrderParams{Timeout: T.Add(lead).Sub(now).Truncate(time.Millisecond), RemindBefore: lead}
		}
		return hourglass.CreateOrderParams{Timeout: T.Add(time.Duration(i-burst) * time.Second / others).Sub(now).Truncate(time.Millisecond), RemindBefore: hourglass.NoReminder}
	}, func(int) bool { return false })
	t.Logf("created %d orders in %s", burst+others, time.Since(start).Round(time.Millisecond))
	if time.Now().After(T) {
		t.Fatalf("the creates ran past T")
	}
	r.mu.Lock()
	due := 0
	var spread [2]time.Time
	for _, o := range r.orders {
		if !o.RemindAt.IsZero() {
			due++
			if spread[0].IsZero() || o.RemindAt.Before(spread[0]) {
				spread[0] = o.RemindAt
			}
			if o.RemindAt.After(spread[1]) {
				spread[1] = o.RemindAt
			}
		}
	}
	r.mu.Unlock()
	// Polled every 100 ms, and not before T + 3 s: the test's own queries
	// (a count of the 5,000 orders closing over [T, T+1 s)) must not take
	// the cores the burst is measured on.
	testenv.EventuallyEvery(t, time.Until(T)+120*time.Second, 100*time.Millisecond, "every reminder sent and every other order closed", func() bool {
		if time.Now().Before(T.Add(3 * time.Second)) {
			return false
		}
		n, err := r.db.CountPendingDue(t.Context(), T.Add(time.Second), 0)
		left, err2 := r.db.RemindersDue(t.Context(), hourglass.PendingDueParams{Until: T.Add(time.Second), Limit: 1})
		return err == nil && err2 == nil && n == 0 && len(left) == 0
	})
	remind, closes, last := r.lateness(true)
	t.Logf("store %s: %d reminders due from %s to %s (T %s); last sent %s after T; reminders %s; the other orders' closes %s",
		testenv.Store(t, "sqlite"), due, spread[0].Format(time.StampMilli), spread[1].Format(time.StampMilli), T.Format(time.StampMilli),
		last.Sub(T).Round(time.Millisecond), quantiles(remind), quantiles(closes))
	// The target (issue 41) is reported, not asserted: on a shared
	// machine it measures the machine's load as much as hourglass.
	if last.Sub(T) > 3*time.Second {
		t.Logf("target not met: the last reminder was sent %s after T, want within 3 s", last.Sub(T))
	}
}
