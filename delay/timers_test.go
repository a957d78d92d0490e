package delay_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/node/nodetest"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/storetest"
)

// TestEveryMechanismFiresTimers (issue 12): for every mechanism Open knows,
// an engine over a store (HOURGLASS_TEST_STORE; SQLite by default) and that
// mechanism fires 300 clients' timers, each exactly once (one timer.fired
// event) and never before its fire_at, among 50 orders it still closes
// (once, not early); a cancelled timer never fires and a re-armed one fires
// once, at its new time. Timer ids are 2^62 and up: a mechanism that
// carried an id as a float or a 32-bit number would fire the wrong one.
// A timer the sweeper had to fire (the mechanism lost it) fails the test.
// Kafka runs on kfake (in-process) unless HOURGLASS_TEST_KAFKA_URL is set.
func TestEveryMechanismFiresTimers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every delay mechanism for a few seconds; skipped with -short")
	}
	for _, name := range delay.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testMechanismFiresTimers(t, name)
		})
	}
}

const (
	mechTimers = 300
	mechOrders = 50
)

func testMechanismFiresTimers(t *testing.T, name string) {
	ctx := t.Context()
	logger := slog.New(slog.DiscardHandler)
	// A node started as serve starts one, its mechanism opened with this
	// test's namespace and services (and its broker objects destroyed at
	// the end).
	obs := &firedCounter{}
	n := startMechanismNode(t, name, obs, logger)
	db, eng := n.Store, n.Engine
	if _, err := db.PutProduct(ctx, hourglass.Product{SKU: "M", Name: "M", Available: 1 << 20}); err != nil {
		t.Fatal(err)
	}

	// What the API does: the store first, then the engine. The first ten
	// are cancelled at once; the next ten re-armed at once 1.5 s later,
	// so their first timer in the mechanism is stale and must fire
	// nothing. Fire times from 2 s out, one every 5 ms; orders due among
	// them.
	start := time.Now()
	arm := func(key string, at time.Time, hash byte) hourglass.Timer {
		t.Helper()
		tm, _, err := db.ArmTimer(ctx, hourglass.ArmTimerParams{Key: key, FireAt: at, RequestHash: []byte{hash}})
		if err != nil {
			t.Fatalf("arm %s: %v", key, err)
		}
		eng.Schedule(hourglass.DueItem{ID: tm.ID, At: tm.FireAt})
		return tm
	}
	keys := make([]string, mechTimers)
	keyOf := map[int64]string{}
	cancelled := map[string]bool{}
	rearmed := map[string]time.Time{}
	// On a loaded machine the arming can take longer than the 2 s before
	// the first fire_at: a timer may then fire before its cancel or
	// re-arm reaches the store, which the API allows (a cancel of a fired
	// timer answers timer_fired; a re-arm committed after the fire arms a
	// new one). rearmDone keeps when each re-arm returned, so a second
	// fire is accepted only when the first committed before it.
	rearmDone := map[string]time.Time{}
	for i := range mechTimers {
		keys[i] = fmt.Sprintf("mech-%03d", i)
		at := start.Add(2*time.Second + time.Duration(i)*5*time.Millisecond)
		tm := arm(keys[i], at, 1)
		keyOf[tm.ID] = keys[i]
		switch {
		case i < 10:
			sent := time.Now()
			_, err := db.CancelTimer(ctx, keys[i])
			switch {
			case errors.Is(err, hourglass.ErrTimerFired) && !sent.Before(at):
				t.Logf("timer %s fired before its cancel was sent (%s after its fire_at)", keys[i], sent.Sub(at).Round(time.Millisecond))
			case err != nil:
				t.Fatalf("cancel %s: %v", keys[i], err)
			default:
				eng.Cancel(tm.ID)
				cancelled[keys[i]] = true
			}
		case i < 20:
			rearmed[keys[i]] = arm(keys[i], at.Add(1500*time.Millisecond), 2).FireAt
			rearmDone[keys[i]] = time.Now()
		}
	}
	var orders []int64
	for i := range mechOrders {
		o, _, err := db.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: fmt.Sprint("u", i), Items: []hourglass.Item{{SKU: "M", Quantity: 1}},
			Timeout: 2*time.Second + time.Duration(i)*30*time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		eng.Schedule(hourglass.DueItem{ID: o.ID, At: o.Deadline})
		orders = append(orders, o.ID)
	}
	if armed := time.Since(start); armed > 2*time.Second {
		t.Logf("arming took %s: some fired meanwhile", armed.Round(time.Millisecond))
	}

	// Wait for every timer and order, then a little longer, so that a
	// second fire would show.
	testenv.Eventually(t, 30*time.Second, "no timer scheduled and no order pending", func() bool {
		c, err := db.TimerCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pending, err := db.CountPendingDue(ctx, time.Now().Add(time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		return c[hourglass.TimerScheduled] == 0 && pending == 0
	})

	settled := time.Since(start)
	testenv.Phase(t, 500*time.Millisecond, "the node goes on: a second fire would show")

	var late time.Duration
	for _, k := range keys {
		tm, err := db.Timer(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := db.OrderEvents(ctx, tm.ID)
		if err != nil {
			t.Fatal(err)
		}
		var firedAt []time.Time
		for _, ev := range evs {
			if ev.Type == hourglass.EventTimerFired {
				firedAt = append(firedAt, ev.CreatedAt)
			}
		}
		if done, ok := rearmDone[k]; ok && len(firedAt) == 2 {
			// The first arming fired before the re-arm committed, the
			// re-armed one after it (the clocks of a server store and of
			// this process may differ by a few ms: slack of 50 ms): the
			// re-armed timer's own fire is the second. A stale fire after
			// the re-arm committed fails.
			if firedAt[0].After(done.Add(50 * time.Millisecond)) {
				t.Errorf("re-armed timer %s: its old time fired at %s, after the re-arm returned at %s", k,
					firedAt[0].Format(time.RFC3339Nano), done.Format(time.RFC3339Nano))
			} else {
				t.Logf("re-armed timer %s fired before its re-arm committed, then again at its new time", k)
			}
			firedAt = firedAt[1:]
		}
		fired := len(firedAt)
		switch {
		case cancelled[k]:
			if tm.Status != hourglass.TimerCancelled || fired != 0 {
				t.Errorf("cancelled timer %s: status %s, %d timer.fired events; want cancelled, none", k, tm.Status, fired)
			}
			continue
		case tm.Status != hourglass.TimerFired || fired != 1:
			t.Errorf("timer %s: status %s, %d timer.fired events; want fired, exactly 1", k, tm.Status, fired)
			continue
		case tm.FiredAt.Before(tm.FireAt):
			t.Errorf("timer %s fired at %s, %s before its fire_at %s", k, tm.FiredAt.Format(time.RFC3339Nano), tm.FireAt.Sub(tm.FiredAt), tm.FireAt.Format(time.RFC3339Nano))
		}
		if at, ok := rearmed[k]; ok && !tm.FireAt.Equal(at) {
			t.Errorf("re-armed timer %s: fire_at %s, want %s", k, tm.FireAt, at)
		}
		late = max(late, tm.FiredAt.Sub(tm.FireAt))
	}
	for _, id := range orders {
		o, err := db.Order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := db.OrderEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		closes := 0
		for _, ev := range evs {
			if ev.Type == hourglass.EventOrderClosed {
				closes++
			}
		}
		if o.Status != hourglass.StateClosed || o.ClosedAt.Before(o.Deadline) || closes != 1 {
			t.Errorf("order %d: status %s, closed_at %s, deadline %s, %d order.closed events; want closed once, not early", id, o.Status, o.ClosedAt, o.Deadline, closes)
		}
	}
	byMech, bySweep := obs.counts()
	// Every timer, re-armed ones included, is the mechanism's to fire: a
	// re-arm's new time is published in turn (OutboxDone removes only the
	// time published; a broker's message id carries the time). One the
	// sweeper fires was lost by the mechanism.
	obs.mu.Lock()
	for _, id := range obs.sweptIDs {
		k := keyOf[id]
		what := "timer"
		if !rearmed[k].IsZero() {
			what = "re-armed timer"
		}
		t.Errorf("%s lost %s %s (id %d): the sweeper fired it", name, what, k, id)
	}
	obs.mu.Unlock()
	t.Logf("%s: %d timers fired, %d orders closed, all within %s of the start; latest timer %s after its fire_at; fired by the mechanism %d, by the sweeper %d",
		name, mechTimers-len(cancelled), len(orders), settled.Round(time.Millisecond), late.Round(time.Millisecond), byMech, bySweep)
	if byMech == 0 {
		t.Errorf("%s fired no timer itself: the sweeper fired all %d", name, bySweep)
	}
}

// startMechanismNode starts a node as serve starts one, its mechanism
// opened with this test's namespace and services (and its broker objects
// destroyed at the end), a sweep every 200 ms told to obs.
func startMechanismNode(t *testing.T, name string, obs engine.Observer, logger *slog.Logger) *node.Node {
	t.Helper()
	return startMechanismNodeWith(t, name, engine.Config{SweepInterval: 200 * time.Millisecond, Observer: obs}, logger)
}

// startMechanismNodeWith is startMechanismNode with the engine's settings.
func startMechanismNodeWith(t *testing.T, name string, eng engine.Config, logger *slog.Logger) *node.Node {
	t.Helper()
	return nodetest.Start(t, node.Config{
		Store:     store.Options{URL: storetest.URL(t)},
		Delay:     name,
		DelayFeed: delay.FeedOf(name),
		OpenDelay: nodetest.Mechanism(t, name, func(db hourglass.Store) delay.Options { return mechanismOptions(t, name, db, logger) }),
		Engine:    eng,
		Logger:    logger,
	})
}

// mechanismOptions finds the service a mechanism needs, skipping the test
// when it is absent (failing under CI=true), with a namespace of its own.
func mechanismOptions(t *testing.T, name string, db hourglass.Store, logger *slog.Logger) delay.Options {
	t.Helper()
	o := delay.Options{Store: db, Logger: logger, Namespace: hourglasstest.Namespace(t), PollInterval: 100 * time.Millisecond}
	switch name {
	case "redis", "rediskeyspace":
		o.RedisURL = testenv.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", delay.RedisURLDefault)
	case "rabbitmq":
		o.RabbitMQURL = testenv.ServiceURL(t, "RabbitMQ", "HOURGLASS_TEST_RABBITMQ_URL", delay.RabbitMQURLDefault)
	case "nats":
		o.NATSURL = testenv.ServiceURL(t, "NATS", "HOURGLASS_TEST_NATS_URL", delay.NATSURLDefault)
	case "kafka":
		o.KafkaURL = kafkaURL(t)
	}
	return o
}

// kafkaURL is the Kafka named by HOURGLASS_TEST_KAFKA_URL when set, else a
// kfake cluster (franz-go's in-process Kafka) for this test.
func kafkaURL(t *testing.T) string {
	t.Helper()
	if os.Getenv("HOURGLASS_TEST_KAFKA_URL") != "" {
		return testenv.ServiceURL(t, "Kafka", "HOURGLASS_TEST_KAFKA_URL", delay.KafkaURLDefault)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return "kafka://" + strings.Join(c.ListenAddrs(), ",")
}

// firedCounter counts the timers the engine fired, by the mechanism or by
// the sweeper.
type firedCounter struct {
	mu              sync.Mutex
	byMech, bySweep int
	sweptIDs        []int64 // the ids the sweeper fired
}

func (c *firedCounter) Fired(f hourglass.FiredTimer, swept bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if swept {
		c.bySweep++
		c.sweptIDs = append(c.sweptIDs, f.ID)
	} else {
		c.byMech++
	}
}

func (c *firedCounter) counts() (byMech, bySweep int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byMech, c.bySweep
}

func (*firedCounter) Closed(hourglass.ClosedOrder, bool) {}
func (*firedCounter) Stale(int)                          {}
func (*firedCounter) CloseFailed(int, error)             {}
func (*firedCounter) Swept(int)                          {}
func (*firedCounter) SchedulerFailed(error)              {}
