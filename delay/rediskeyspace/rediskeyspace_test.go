package rediskeyspace_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/rediskeyspace"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// setup returns the URL of the real Redis (skipping when it is absent) and
// a plain client to inspect it.
func setup(t *testing.T) (string, *goredis.Client) {
	t.Helper()
	raw := testenv.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", rediskeyspace.URLDefault)
	opt, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return raw, c
}

// open opens a scheduler and deletes its index when the test ends (its
// timer keys expire by themselves).
func open(t *testing.T, cfg rediskeyspace.Config, c *goredis.Client) *rediskeyspace.Scheduler {
	t.Helper()
	s, err := rediskeyspace.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		c.Del(context.Background(), cfg.Namespace+":index")
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler {
			return open(t, rediskeyspace.Config{URL: raw, Namespace: ns}, c)
		},
		// Redis's expiry cycle runs hz (10) times a second: events are
		// typically up to ~100 ms late, more under load. This is the
		// weakness the mechanism is kept to show.
		MaxLateness: time.Second,
	})
}

func TestOpenFailsClearly(t *testing.T) {
	t.Parallel()
	raw, _ := setup(t)
	for _, tc := range []struct {
		name string
		cfg  rediskeyspace.Config
		want string
	}{
		{"bad scheme", rediskeyspace.Config{URL: "http://127.0.0.1:6379"}, "bad Redis URL"},
		{"unreachable", rediskeyspace.Config{URL: "redis://127.0.0.1:1/0"}, "cannot use Redis at 127.0.0.1:1 db 0"},
		{"wrong password", rediskeyspace.Config{URL: "redis://nobody:wrong@" + hostOf(t, raw) + "/0"}, "cannot use Redis"},
		{"ping interval out of range", rediskeyspace.Config{URL: raw, PingInterval: time.Millisecond}, "PingInterval must be between"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := rediskeyspace.Open(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("Open succeeded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "wrong@") {
				t.Fatalf("Open: %v; want it to contain %q (and no password)", err, tc.want)
			}
		})
	}
}

// TestOpenWithoutConfigPermission: a user not allowed CONFIG gets a message
// saying to set notify-keyspace-events in redis.conf.
func TestOpenWithoutConfigPermission(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	ctx := context.Background()
	user := hourglasstest.Namespace(t)
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">secret", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Skipf("cannot create an ACL user: %v", err)
	}
	t.Cleanup(func() { c.Do(ctx, "ACL", "DELUSER", user) })
	u, _ := url.Parse(raw)
	u.User = url.UserPassword(user, "secret")
	s, err := rediskeyspace.Open(ctx, rediskeyspace.Config{URL: u.String()})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded without CONFIG permission")
	}
	if !strings.Contains(err.Error(), `set notify-keyspace-events to include "Ex" in redis.conf, or grant the user CONFIG`) {
		t.Fatalf("Open: %v; want the redis.conf advice", err)
	}
}

// TestRunTurnsEventsBackOn: a Redis restart forgets notify-keyspace-events;
// each Run sets it again. Not parallel: it switches events off for the
// whole server.
func TestRunTurnsEventsBackOn(t *testing.T) {
	raw, c := setup(t)
	ctx := context.Background()
	s := open(t, rediskeyspace.Config{URL: raw, Namespace: hourglasstest.Namespace(t)}, c)
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "").Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan hourglass.DueItem, 1)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.Run(runCtx, func(_ context.Context, due []hourglass.DueItem) error {
			for _, tm := range due {
				got <- tm
			}
			return nil
		})
	}()
	want := hourglass.DueItem{ID: 9, At: time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)}
	if err := s.Schedule(ctx, []hourglass.DueItem{want}); err != nil {
		t.Fatal(err)
	}
	select {
	case tm := <-got:
		if tm.ID != want.ID || !tm.At.Equal(want.At) {
			t.Fatalf("delivered %v, want %v", tm, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no expired event: Run did not turn notify-keyspace-events back on")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestEarlyEventIsHeld: an event that arrives before the deadline by this
// process's clock (Redis's clock ahead) is held on that clock until the
// deadline, and delivered at it.
func TestEarlyEventIsHeld(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	ctx := t.Context()
	clock := hourglasstest.NewClock(time.Now().Add(-400 * time.Millisecond)) // this process is 400 ms behind
	s := open(t, rediskeyspace.Config{URL: raw, Namespace: hourglasstest.Namespace(t), Clock: clock}, c)
	got := make(chan int64, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.Run(runCtx, func(_ context.Context, due []hourglass.DueItem) error {
		for _, d := range due {
			got <- d.ID
		}
		return nil
	})
	sleepers := clock.Sleepers()
	deadline := clock.Now().Add(100 * time.Millisecond).Truncate(time.Millisecond)
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 1, At: deadline}}); err != nil {
		t.Fatal(err)
	}
	// Redis expires the key ~100 ms from now (its clock); by this process's
	// clock the deadline is then still 50 ms away: the event is held.
	clock.Set(deadline.Add(-50 * time.Millisecond))
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := clock.BlockUntil(wctx, sleepers+1); err != nil {
		t.Fatalf("the early event was not held on the clock: %v", err)
	}
	clock.Advance(49 * time.Millisecond)
	select {
	case id := <-got:
		t.Fatalf("timer %d delivered 1 ms before its deadline by this process's clock", id)
	default:
	}
	clock.Advance(time.Millisecond)
	select {
	case id := <-got:
		if id != 1 {
			t.Fatalf("delivered timer %d, want 1", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held event was not delivered at its deadline")
	}
}

func TestCancelDeletesKey(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	ctx := context.Background()
	ns := hourglasstest.Namespace(t)
	s := open(t, rediskeyspace.Config{URL: raw, Namespace: ns}, c)
	d := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 1, At: d}, {ID: 2, At: d}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, []int64{2, 3}); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, ns+":order:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := ns + ":order:1:" + itoa(d.UnixMilli()); len(keys) != 1 || keys[0] != want {
		t.Fatalf("keys %v, want [%s]", keys, want)
	}
	c.Del(ctx, keys...)
}

// TestRunFailsWhenRedisGoesAway cuts the subscription (through a proxy):
// Run must return an error promptly, and work again once Redis is back.
func TestRunFailsWhenRedisGoesAway(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	p := testenv.NewProxy(t, hostOf(t, raw))
	s := open(t, rediskeyspace.Config{URL: "redis://" + p.Addr() + "/0", Namespace: hourglasstest.Namespace(t), PingInterval: 100 * time.Millisecond}, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int64, 10)
	// awaitSubscribed schedules a probe every 100 ms until one arrives, so
	// on a loaded machine more than got holds may arrive after it stopped
	// reading. A send that ignored ctx then held a dispatcher worker, and
	// Run, which waits for its workers, did not return after the cut (a
	// cold CI run: 10 s).
	deliver := func(ctx context.Context, due []hourglass.DueItem) error {
		for _, tm := range due {
			select {
			case got <- tm.ID:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	awaitSubscribed(t, s, got)
	p.Cut()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil with Redis away")
		}
		t.Logf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of Redis going away")
	}
	go func() { done <- s.Run(ctx, deliver) }()
	if err := <-done; err == nil {
		t.Fatal("Run returned nil with Redis still away")
	}
	p.Restore()
	go func() { done <- s.Run(ctx, deliver) }()
	awaitSubscribed(t, s, got)
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 7, At: time.Now().Add(100 * time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	giveUp := time.After(5 * time.Second)
	for delivered := false; !delivered; {
		select {
		case id := <-got:
			switch {
			case id >= probeID: // a probe of awaitSubscribed's that came out late
			case id != 7:
				t.Fatalf("delivered %d, want 7", id)
			default:
				delivered = true
			}
		case <-giveUp:
			t.Fatal("timer not delivered after Redis came back")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after ctx end: %v", err)
	}
}

// probeID is the least id of awaitSubscribed's probe timers, above any
// a test schedules.
const probeID = 1 << 40

// awaitSubscribed waits (up to 10 s) until s's Run hears expiries: it
// schedules a probe timer due in 10 ms every 100 ms (an expiry before the
// subscription is lost) until one of its probes comes out of got. Its
// probes' ids grow with the wall clock (probeID + µs), so a probe of an
// earlier call that comes out late is told apart and passed over.
func awaitSubscribed(t *testing.T, s *rediskeyspace.Scheduler, got <-chan int64) {
	t.Helper()
	first := probeID + time.Now().UnixMicro()
	testenv.EventuallyEvery(t, 10*time.Second, 100*time.Millisecond, "Run subscribed (a probe timer delivered)", func() bool {
		for {
			var id int64
			select {
			case id = <-got:
			default: // none yet: another probe
				probe := probeID + time.Now().UnixMicro()
				if err := s.Schedule(context.Background(), []hourglass.DueItem{{ID: probe, At: time.Now().Add(10 * time.Millisecond)}}); err != nil {
					t.Fatal(err)
				}
				return false
			}
			switch {
			case id >= first:
				return true
			case id < probeID:
				t.Fatalf("delivered %d while waiting for a probe", id)
			}
			// An earlier call's probe: look again.
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func hostOf(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestDestroy: after Close, Destroy deletes every key of the namespace
// (more than one SCAN step's worth of timers), so a retired namespace or a
// test leaves nothing behind; a second Destroy finds nothing and succeeds.
// (The conformance suite's DestroyForgetsTheNamespace checks that no
// destroyed timer fires, on every mechanism with a Destroy.)
func TestDestroy(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	ns := hourglasstest.Namespace(t)
	s, err := rediskeyspace.Open(context.Background(), rediskeyspace.Config{URL: raw, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour)
	timers := make([]hourglass.DueItem, 2500)
	for i := range timers {
		timers[i] = hourglass.DueItem{ID: int64(i + 1), At: at}
	}
	if err := s.Schedule(t.Context(), timers); err != nil {
		t.Fatal(err)
	}
	if keys := c.Keys(t.Context(), ns+":*").Val(); len(keys) == 0 {
		t.Fatal("no keys under the namespace after Schedule")
	}
	s.Close()
	for range 2 {
		if err := s.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		if keys := c.Keys(t.Context(), ns+":*").Val(); len(keys) > 0 {
			t.Fatalf("%d keys left under the namespace, such as %q", len(keys), keys[0])
		}
	}
}
