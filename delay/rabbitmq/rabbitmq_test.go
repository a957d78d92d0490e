package rabbitmq

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

func brokerURL(t *testing.T) string {
	t.Helper()
	return testenv.ServiceURL(t, "RabbitMQ", "HOURGLASS_TEST_RABBITMQ_URL", URLDefault)
}

// setup opens a scheduler on namespace ns (a fresh one if empty) and deletes
// the namespace's queues and exchanges when the test ends.
func setup(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = brokerURL(t)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = hourglasstest.Namespace(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		adminDelete(t, cfg.Namespace) // what it declared before failing
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler {
			return setup(t, Config{URL: url, Namespace: ns})
		},
		// Spread-out timers are waited out in memory and fire within a few
		// ms; the margin absorbs the machine being shared with other tests.
		MaxLateness: time.Second, // a broken mechanism is seconds late; lateness itself is measured by hourglass bench
	})
}

// TestConformanceThroughTiers runs the suite with a 100 ms margin, so that
// its deadlines (0.3 to 1.5 s ahead) travel through the 1 s tier and
// dead-lettering instead of being waited out in memory from the start.
func TestConformanceThroughTiers(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler {
			return setup(t, Config{URL: url, Namespace: ns, Mode: ModeTiers, Margin: 100 * time.Millisecond})
		},
		MaxLateness: time.Second, // a broken mechanism is seconds late; lateness itself is measured by hourglass bench
	})
}

func TestPickTier(t *testing.T) {
	t.Parallel()
	tiers := Tiers()
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, -1},
		{0, -1},
		{999 * time.Millisecond, -1},
		{time.Second, 0},
		{1999 * time.Millisecond, 0},
		{2 * time.Second, 1},
		{30 * time.Minute, 10}, // 1024 s
		{7 * 24 * time.Hour, tierCount - 1},
		{1000 * 24 * time.Hour, tierCount - 1},
	} {
		if got := pickTier(tiers, tc.d); got != tc.want {
			t.Errorf("pickTier(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestTiers(t *testing.T) {
	t.Parallel()
	tiers := Tiers()
	if len(tiers) != tierCount || tiers[0] != time.Second || tiers[tierCount-1] != 524288*time.Second {
		t.Fatalf("tiers %v", tiers)
	}
	topo := newTopology("ns", MarginDefault, false)
	if topo.names[0] != "ns.tier.1s" || topo.names[tierCount-1] != "ns.tier.524288s" {
		t.Fatalf("names %v", topo.names)
	}
	if len(topo.names[tierCount-1])-2 > 255-maxNamespace {
		t.Fatalf("the longest suffix does not fit in a name with a %d-byte namespace", maxNamespace)
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	tiers := newTopology("ns", time.Second, false)
	plugin := newTopology("ns", time.Second, true)
	for _, tc := range []struct {
		name string
		topo topology
		d    time.Duration
		want route
	}{
		{"past due", tiers, -time.Second, route{key: "ns.due", mandatory: true, tier: -1}},
		{"last stretch", tiers, 1999 * time.Millisecond, route{key: "ns.due", mandatory: true, tier: -1}},
		{"first tier", tiers, 2 * time.Second, route{key: "ns.tier.1s", mandatory: true, tier: 0}},
		{"margin keeps it below 2s", tiers, 2999 * time.Millisecond, route{key: "ns.tier.1s", mandatory: true, tier: 0}},
		{"30 minutes", tiers, 30 * time.Minute, route{key: "ns.tier.1024s", mandatory: true, tier: 10}},
		{"plugin due", plugin, time.Second, route{key: "ns.due.delayed", mandatory: true, tier: -1}},
		// Plugin mode holds the same last stretch in memory as the tiers
		// (issue 11: x-delay was the whole delay, so lateness was the
		// plugin's firing rate).
		{"plugin last stretch", plugin, 1999 * time.Millisecond, route{key: "ns.due.delayed", mandatory: true, tier: -1}},
		{"plugin delay less the margin", plugin, 2 * time.Second, route{exchange: "ns.delayed", key: dueKey, delay: 1000, tier: -1}},
		{"plugin delay rounds down", plugin, 2500*time.Millisecond + time.Microsecond, route{exchange: "ns.delayed", key: dueKey, delay: 1500, tier: -1}},
		{"plugin 30 minutes", plugin, 30 * time.Minute, route{exchange: "ns.delayed", key: dueKey, delay: 30*60*1000 - 1000, tier: -1}},
	} {
		if got := tc.topo.route(tc.d); got != tc.want {
			t.Errorf("%s: route(%s) = %+v, want %+v", tc.name, tc.d, got, tc.want)
		}
	}
	// A hop is always shorter than the delay minus the margin, so the
	// consumer never forwards a timer it should hold, or the reverse.
	for d := time.Duration(0); d < 70*time.Second; d += 7 * time.Millisecond {
		if r := tiers.route(d); !r.toDue() && tiers.tiers[r.tier] > d-time.Second {
			t.Fatalf("route(%s) picks tier %s", d, tiers.tiers[r.tier])
		}
		// A plugin-delayed timer comes out with the margin left, which is
		// inside the last stretch: the consumer holds it, not sends it
		// round again.
		if r := plugin.route(d); !r.toDue() && (time.Duration(r.delay)*time.Millisecond > d-time.Second ||
			!plugin.route(d-time.Duration(r.delay)*time.Millisecond).toDue()) {
			t.Fatalf("plugin route(%s) = %+v", d, r)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	tm := hourglass.DueItem{ID: 42, At: hourglass.FromUnixMilli(1_700_000_000_123)}
	msg := encode([]hourglass.DueItem{tm}, route{delay: 5}, time.Now())
	if msg.DeliveryMode != amqp.Persistent || msg.Expiration != "" || msg.Headers["x-delay"] != int64(5) {
		t.Fatalf("publishing %+v", msg)
	}
	// One timer keeps the shape every version reads.
	if string(msg.Body) != `{"order_id":42,"deadline_ms":1700000000123}` {
		t.Fatalf("one timer's body = %s", msg.Body)
	}
	got, err := decode(msg.Body)
	if err != nil || len(got) != 1 || got[0].ID != tm.ID || !got[0].At.Equal(tm.At) {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, tm)
	}
	var pack []hourglass.DueItem
	for i := range packMax {
		pack = append(pack, hourglass.DueItem{ID: int64(i + 1), At: hourglass.FromUnixMilli(1_700_000_000_000 + int64(i))})
	}
	msg = encode(pack, route{}, time.Now())
	if len(msg.Body) > 16<<10 {
		t.Errorf("a full pack is %d bytes", len(msg.Body))
	}
	got, err = decode(msg.Body)
	if err != nil || len(got) != packMax || got[7] != pack[7] || got[packMax-1] != pack[packMax-1] {
		t.Fatalf("decode of a pack = %d timers, %v", len(got), err)
	}
	for _, body := range []string{"", "{", `{"order_id":1}`, `{"deadline_ms":5}`, `{"order_id":-1,"deadline_ms":5}`, "hello",
		`{"timers":[]}`, `{"timers":[{"order_id":1}]}`, `{"order_id":1,"deadline_ms":5,"timers":[{"order_id":2,"deadline_ms":5}]}`,
		`{"timers":[` + strings.Repeat(`{"order_id":1,"deadline_ms":5},`, packMax) + `{"order_id":1,"deadline_ms":5}]}`} {
		if _, err := decode([]byte(body)); err == nil {
			t.Errorf("decode(%.60q) succeeded", body)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{Prefetch: 65535, Margin: time.Millisecond, Mode: ModeDelayedExchange}, ""},
		{Config{Prefetch: 65536}, "Prefetch"},
		{Config{Prefetch: -1}, "Prefetch"},
		{Config{DeliverBatch: -1}, "DeliverBatch"},
		{Config{Margin: time.Microsecond}, "Margin"},
		{Config{Margin: 2 * time.Minute}, "Margin"},
		{Config{RetryMax: 2 * time.Hour}, "RetryMax"},
		{Config{DialTimeout: time.Millisecond}, "DialTimeout"},
		{Config{PublishTimeout: -time.Second}, "PublishTimeout"},
		{Config{Mode: 7}, "Mode"},
		{Config{Namespace: strings.Repeat("n", maxNamespace+1)}, "Namespace"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestNewExplainsWhatToFix(t *testing.T) {
	t.Parallel()
	good := brokerURL(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	withPassword := func(p string) string { v := *u; v.User = url.UserPassword(u.User.Username(), p); return v.String() }
	withPath := func(p string) string { v := *u; v.Path = p; return v.String() }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		name, url string
		mode      Mode
		want      string
	}{
		{"scheme", "http://guest:secret@127.0.0.1:5672/", ModeAuto, "bad URL"},
		{"syntax", "amqp://guest:sec%zzret@127.0.0.1/", ModeAuto, "bad URL"},
		{"unreachable", "amqp://guest:secret@" + closedPort + "/", ModeAuto, "cannot reach RabbitMQ at " + closedPort},
		{"password", withPassword("secret-wrong"), ModeAuto, "login refused for user"},
		{"vhost", withPath("/no-such-vhost"), ModeTiers, `may not open vhost "no-such-vhost"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := New(ctx, Config{URL: tc.url, Namespace: hourglasstest.Namespace(t), Mode: tc.mode})
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") || strings.Contains(msg, "secret") {
				t.Fatalf("error %q: want one line containing %q and no password", msg, tc.want)
			}
			t.Log(msg)
		})
	}
}

func TestDelayedExchangeModeNeedsThePlugin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := New(ctx, Config{URL: brokerURL(t), Namespace: hourglasstest.Namespace(t), Mode: ModeDelayedExchange})
	if err == nil {
		s.Close()
		s.Destroy(ctx)
		t.Skip("this broker has the rabbitmq_delayed_message_exchange plugin")
	}
	if !strings.Contains(err.Error(), "enable the rabbitmq_delayed_message_exchange plugin") {
		t.Fatalf("error %v", err)
	}
}

func TestNewRefusesAQueueWithOtherArguments(t *testing.T) {
	t.Parallel()
	ns := hourglasstest.Namespace(t)
	conn, ch := adminChannel(t)
	defer conn.Close()
	if _, err := ch.QueueDeclare(ns+".due", true, false, false, false, nil); err != nil { // classic
		t.Fatal(err)
	}
	t.Cleanup(func() { adminDelete(t, ns) })
	_, err := New(context.Background(), Config{URL: brokerURL(t), Namespace: ns, Mode: ModeTiers})
	if err == nil || !strings.Contains(err.Error(), "exists with other settings") {
		t.Fatalf("New: %v", err)
	}
}

// TestMultipleHops sends timers through one and two tiers and checks each
// arrives, never early and on time.
func TestMultipleHops(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{Mode: ModeTiers})
	now := time.Now()
	timers := []hourglass.DueItem{
		{ID: 1, At: now.Add(2500 * time.Millisecond).Truncate(time.Millisecond)}, // 1s → hold
		{ID: 2, At: now.Add(4500 * time.Millisecond).Truncate(time.Millisecond)}, // 2s → 1s → hold
		{ID: 3, At: now.Add(5500 * time.Millisecond).Truncate(time.Millisecond)}, // 4s → hold
	}
	if err := s.Schedule(context.Background(), timers); err != nil {
		t.Fatal(err)
	}
	got := collect(t, s, len(timers), 15*time.Second)
	for _, tm := range timers {
		at, ok := got[tm.ID]
		if !ok {
			t.Fatalf("order %d not delivered", tm.ID)
		}
		late := at.Sub(tm.At)
		if late < 0 || late > 500*time.Millisecond {
			t.Errorf("order %d delivered %s after its deadline", tm.ID, late)
		}
		t.Logf("order %d: %s late", tm.ID, late)
	}
}

// TestBurstThroughATier sends 10,000 timers due in the same millisecond
// 6 s ahead through the 4 s tier: they all expire at once, and the default
// margin has to absorb the broker's dead-lettering of the whole burst.
func TestBurstThroughATier(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 timers 6 s ahead; skipped with -short")
	}
	t.Parallel()
	s := setup(t, Config{Mode: ModeTiers})
	deadline := time.Now().Add(6 * time.Second).Truncate(time.Millisecond)
	timers := make([]hourglass.DueItem, 10000)
	for i := range timers {
		timers[i] = hourglass.DueItem{ID: int64(i + 1), At: deadline}
	}
	for i := 0; i < len(timers); i += 1000 {
		if err := s.Schedule(context.Background(), timers[i:i+1000]); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Until(deadline); d < 5*time.Second {
		t.Logf("publishing took long: %s left, some timers skipped the 4 s tier", d)
	}
	got := collect(t, s, len(timers), 30*time.Second)
	if len(got) != len(timers) {
		t.Fatalf("%d of %d delivered", len(got), len(timers))
	}
	var late []time.Duration
	for _, at := range got {
		if at.Before(deadline) {
			t.Fatalf("delivered %s early", deadline.Sub(at))
		}
		late = append(late, at.Sub(deadline))
	}
	slices.Sort(late)
	t.Logf("10000 timers through the 4 s tier: lateness p50 %s p99 %s max %s", late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
}

// TestScheduleFailsOnDeletedQueueThenRecovers deletes a tier queue behind
// the scheduler's back: the publish comes back unroutable, Schedule says so,
// and the next call redeclares the topology and succeeds.
func TestScheduleFailsOnDeletedQueueThenRecovers(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{Mode: ModeTiers})
	tm := []hourglass.DueItem{{ID: 1, At: time.Now().Add(6 * time.Second).Truncate(time.Millisecond)}}
	if err := s.Schedule(context.Background(), tm); err != nil { // declares the 4 s tier
		t.Fatal(err)
	}
	conn, ch := adminChannel(t)
	defer conn.Close()
	if _, err := ch.QueueDelete(s.topo.names[2], false, false, false); err != nil {
		t.Fatal(err)
	}
	err := s.Schedule(context.Background(), tm)
	if err == nil || !strings.Contains(err.Error(), "NO_ROUTE") {
		t.Fatalf("Schedule to a deleted queue: %v", err)
	}
	if err := s.Schedule(context.Background(), tm); err != nil {
		t.Fatalf("Schedule after the failure: %v", err)
	}
}

// TestRunFailsWhenItsQueueIsDeleted: a consumer the broker cancels makes
// Run return an error, not hang.
func TestRunFailsWhenItsQueueIsDeleted(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{Mode: ModeTiers})
	done := make(chan error, 1)
	go func() {
		done <- s.Run(context.Background(), func(context.Context, []hourglass.DueItem) error { return nil })
	}()
	conn, ch := adminChannel(t)
	defer conn.Close()
	testenv.EventuallyEvery(t, 10*time.Second, 20*time.Millisecond, "Run consuming its due queue", func() bool {
		q, err := ch.QueueDeclarePassive(s.topo.due, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("inspect the due queue: %v", err)
		}
		return q.Consumers > 0
	})
	if _, err := ch.QueueDelete(s.topo.due, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil")
		}
		t.Log(err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its queue was deleted")
	}
}

// TestConnectionLoss cuts the connections through a proxy: Run returns an
// error at once, Schedule fails fast while the broker is unreachable, and
// both work again once it is back, with nothing lost.
func TestConnectionLoss(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	u.Host = p.Addr()
	s := setup(t, Config{URL: u.String(), Mode: ModeTiers})
	deliver, got := recorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	at := func(d time.Duration) time.Time { return time.Now().Add(d).Truncate(time.Millisecond) }
	timers := []hourglass.DueItem{{ID: 1, At: at(300 * time.Millisecond)}, {ID: 2, At: at(3 * time.Second)}}
	if err := s.Schedule(ctx, timers); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the first order delivered", func() bool { return len(got()) >= 1 }) // Run is consuming

	p.Cut()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after its connection was cut")
		}
		t.Logf("Run: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its connection was cut")
	}
	start := time.Now()
	if err := s.Schedule(ctx, timers[:1]); err == nil {
		t.Fatal("Schedule succeeded while the broker was unreachable")
	} else if time.Since(start) > 2*time.Second {
		t.Fatalf("Schedule took %s to fail", time.Since(start))
	} else {
		t.Logf("Schedule: %v", err)
	}

	p.Restore()
	timers = append(timers, hourglass.DueItem{ID: 3, At: at(1500 * time.Millisecond)})
	if err := s.Schedule(ctx, timers[2:]); err != nil {
		t.Fatalf("Schedule after the broker came back: %v", err)
	}
	go func() { done <- s.Run(ctx, deliver) }()
	testenv.Eventually(t, 10*time.Second, "3 orders delivered", func() bool { return len(got()) >= 3 })
	for _, tm := range timers {
		if at := got()[tm.ID]; at.Before(tm.At) {
			t.Errorf("order %d delivered %s early", tm.ID, tm.At.Sub(at))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

// recorder returns a Deliver that records the first delivery time of each
// order, and a snapshot of it.
func recorder() (hourglass.Deliver, func() map[int64]time.Time) {
	var mu sync.Mutex
	seen := map[int64]time.Time{}
	deliver := func(_ context.Context, due []hourglass.DueItem) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, tm := range due {
			if _, ok := seen[tm.ID]; !ok {
				seen[tm.ID] = now
			}
		}
		return nil
	}
	return deliver, func() map[int64]time.Time {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[int64]time.Time, len(seen))
		for k, v := range seen {
			out[k] = v
		}
		return out
	}
}

// collect runs s until n orders were delivered or timeout, and returns when
// each was first delivered.
func collect(t *testing.T, s *Scheduler, n int, timeout time.Duration) map[int64]time.Time {
	t.Helper()
	deliver, got := recorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	waitUntil(timeout, func() bool { return len(got()) >= n })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	return got()
}

// waitUntil waits until cond holds, looking every 10 ms, at most timeout,
// and reports whether it held. It does not fail the test: its caller says
// what is missing.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	giveUp := time.NewTimer(timeout)
	defer giveUp.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-poll.C:
		case <-giveUp.C:
			return cond()
		}
	}
	return true
}

func adminChannel(t *testing.T) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn, ch
}

func adminDelete(t *testing.T, ns string) {
	conn, ch := adminChannel(t)
	defer conn.Close()
	if err := deleteAll(ch, ns); err != nil {
		t.Errorf("delete namespace %s: %v", ns, err)
	}
}

// TestPackedMessageHandedBackWhole schedules timers together, so they travel
// packed in one message, and fails the first Deliver: the message goes back
// to the queue whole, its timers still in memory are dropped rather than
// delivered or acknowledged (they come again with the message; an ack of a
// handed-back message would close the channel), and every timer, and an
// older process's one-timer message, is delivered once, none early.
func TestPackedMessageHandedBackWhole(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{Mode: ModeTiers, DeliverBatch: 10})
	start := time.Now().Truncate(time.Millisecond)
	timers := make([]hourglass.DueItem, 100)
	for i := range timers {
		timers[i] = hourglass.DueItem{ID: int64(i + 1), At: start.Add(600*time.Millisecond + time.Duration(i)*10*time.Millisecond)}
	}
	if err := s.Schedule(context.Background(), timers); err != nil {
		t.Fatal(err)
	}
	conn, ch := adminChannel(t)
	defer conn.Close()
	legacy := hourglass.DueItem{ID: 1000, At: start.Add(200 * time.Millisecond)}
	if err := ch.PublishWithContext(context.Background(), "", s.topo.due, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent,
		Body: []byte(`{"order_id":1000,"deadline_ms":` + strconv.FormatInt(hourglass.UnixMilli(legacy.At), 10) + `}`)}); err != nil {
		t.Fatal(err)
	}
	timers = append(timers, legacy)

	record, got := recorder()
	var (
		calls atomic.Int64
		mu    sync.Mutex
		times = map[int64]int{}
	)
	deliver := func(ctx context.Context, due []hourglass.DueItem) error {
		for _, tm := range due {
			if now := time.Now(); now.Before(tm.At) {
				t.Errorf("order %d delivered %s early", tm.ID, tm.At.Sub(now))
			}
		}
		// The first call is the legacy message's (due 400 ms before the
		// others), the second the packed message's first timers.
		if calls.Add(1) == 2 {
			return errors.New("store down")
		}
		mu.Lock()
		for _, tm := range due {
			times[tm.ID]++
		}
		mu.Unlock()
		return record(ctx, due)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	waitUntil(30*time.Second, func() bool { return len(got()) >= len(timers) })
	testenv.Phase(t, 200*time.Millisecond, "Run goes on: an ack of a handed-back message would end it")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	seen := got()
	for _, tm := range timers {
		if _, ok := seen[tm.ID]; !ok {
			t.Errorf("order %d never delivered (%d of %d were)", tm.ID, len(seen), len(timers))
		}
	}
	if calls.Load() < 3 {
		t.Errorf("%d Deliver calls: the failed one was never followed", calls.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range times {
		if n > 1 {
			t.Errorf("order %d delivered %d times: the handed-back message's timers in memory were not dropped", id, n)
		}
	}
}
