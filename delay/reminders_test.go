package delay_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestEveryMechanismSendsReminders (issue 41): for every mechanism Open
// knows, a node over a store (HOURGLASS_TEST_STORE; SQLite by default)
// sends each pending order's reminder exactly once (one order.expiring),
// never before its remind_at and before its deadline, none for an order
// paid before it, and an extended order's at its new time. Reminder ids
// are 2^60 + the order's: a mechanism that carried them as a float or a
// 32-bit number would send the wrong one. A reminder the sweeper had to
// send (the mechanism lost it) fails the test.
func TestEveryMechanismSendsReminders(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every delay mechanism for a few seconds; skipped with -short")
	}
	for _, name := range delay.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testMechanismSendsReminders(t, name)
		})
	}
}

const mechReminders = 100

func testMechanismSendsReminders(t *testing.T, name string) {
	ctx := t.Context()
	logger := slog.New(slog.DiscardHandler)
	obs := &remindCounter{}
	// The sweeper's grace is 3 s: a broker 3 s late under a loaded CI
	// machine is late, not lossy; one that lost a reminder still fails.
	db := startMechanismNodeWith(t, name, engine.Config{SweepInterval: 200 * time.Millisecond, SweepGrace: 3 * time.Second, Observer: obs}, logger).Store
	if _, err := db.PutProduct(ctx, hourglass.Product{SKU: "R", Name: "R", Available: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	// Orders of 9 s and more (a broker's consumer may take a while to
	// join), reminded 5 s ahead (a reminder up to 5 s late is still
	// sent, not skipped: on a loaded CI machine brokers lag by seconds),
	// one every 10 ms; every fifth paid at once, every tenth (not paid)
	// extended by 1 s at once.
	start := time.Now()
	orders := make([]hourglass.Order, mechReminders)
	paid := map[int64]bool{}
	for i := range orders {
		o, _, err := db.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint("u", i), Items: []hourglass.Item{{SKU: "R", Quantity: 1}},
			Timeout: 9*time.Second + time.Duration(i)*10*time.Millisecond, RemindBefore: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i%5 == 0:
			if _, err := db.PayOrder(ctx, o.ID, fmt.Sprint("pay-", i)); err != nil {
				t.Fatal(err)
			}
			paid[o.ID] = true
		case i%10 == 1:
			if o, err = db.ExtendOrder(ctx, hourglass.ExtendOrderParams{ID: o.ID, By: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		orders[i] = o
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Logf("creating took %s: some reminders were due meanwhile", took.Round(time.Millisecond))
	}
	testenv.Eventually(t, 30*time.Second, "no order pending", func() bool {
		pending, err := db.CountPendingDue(ctx, time.Now().Add(time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		return pending == 0
	})
	testenv.Phase(t, 500*time.Millisecond, "the node goes on: a second reminder would show")

	var late time.Duration
	sent := 0
	for _, o := range orders {
		evs, err := db.OrderEvents(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		var at []time.Time
		for _, ev := range evs {
			if ev.Type == hourglass.EventOrderExpiring {
				at = append(at, ev.CreatedAt)
			}
		}
		switch {
		case paid[o.ID]:
			if len(at) != 0 {
				t.Errorf("order %d, paid before its reminder: %d order.expiring, want none", o.ID, len(at))
			}
		case len(at) != 1:
			t.Errorf("order %d: %d order.expiring, want exactly 1", o.ID, len(at))
		case at[0].Before(o.RemindAt) || !at[0].Before(o.Deadline):
			t.Errorf("order %d: order.expiring at %s; want from its remind_at %s, before its deadline %s", o.ID,
				at[0].Format(time.RFC3339Nano), o.RemindAt.Format(time.RFC3339Nano), o.Deadline.Format(time.RFC3339Nano))
		default:
			sent++
			late = max(late, at[0].Sub(o.RemindAt))
		}
	}
	byMech, bySweep, skipped := obs.counts()
	t.Logf("%s: %d reminders sent (latest %s after its remind_at), by the mechanism %d, by the sweeper %d; %d skipped",
		name, sent, late.Round(time.Millisecond), byMech, bySweep, skipped)
	if bySweep > 0 {
		t.Errorf("%s lost %d reminders: the sweeper sent them", name, bySweep)
	}
}

// remindCounter counts the reminders the engine sent, by the mechanism or
// by the sweeper, and those it skipped.
type remindCounter struct {
	firedCounter
	rmu                      sync.Mutex
	byMech, bySweep, skipped int
}

func (c *remindCounter) Reminded(r hourglass.RemindedOrder, swept bool) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	switch {
	case r.Skipped:
		c.skipped++
	case swept:
		c.bySweep++
	default:
		c.byMech++
	}
}

func (c *remindCounter) counts() (byMech, bySweep, skipped int) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.byMech, c.bySweep, c.skipped
}
