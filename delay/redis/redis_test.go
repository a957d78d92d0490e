package redis_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/redis"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// setup returns the URL of the real Redis (skipping when it is absent) and
// a plain client to inspect it.
func setup(t *testing.T) (string, *goredis.Client) {
	t.Helper()
	raw := testenv.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", redis.URLDefault)
	opt, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return raw, c
}

// open opens a scheduler on ns and deletes its keys when the test ends.
func open(t *testing.T, cfg redis.Config, c *goredis.Client) *redis.Scheduler {
	t.Helper()
	s, err := redis.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if keys := c.Keys(context.Background(), cfg.Namespace+":*").Val(); len(keys) > 0 {
			c.Del(context.Background(), keys...)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler {
			// A short visibility timeout so a killed consumer's batch
			// comes back within the suite's Redelivery (10 s).
			return open(t, redis.Config{URL: raw, Namespace: ns, VisibilityTimeout: 3 * time.Second}, c)
		},
		MaxLateness: time.Second, // a broken mechanism is seconds late; lateness itself is measured by hourglass bench
	})
}

func TestOpenFailsClearly(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	ns := hourglasstest.Namespace(t)
	if err := c.Set(context.Background(), ns+":timers", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), ns+":timers") })
	for _, tc := range []struct {
		name string
		cfg  redis.Config
		want string
	}{
		{"bad scheme", redis.Config{URL: "http://127.0.0.1:6379"}, "bad Redis URL"},
		{"bad db", redis.Config{URL: "redis://127.0.0.1:6379/x"}, "bad Redis URL"},
		{"unreachable", redis.Config{URL: "redis://127.0.0.1:1/0"}, "cannot use Redis at 127.0.0.1:1 db 0"},
		{"wrong password", redis.Config{URL: "redis://nobody:wrong@" + hostOf(t, raw) + "/0"}, "cannot use Redis"},
		{"key of another type", redis.Config{URL: raw, Namespace: ns}, "is a string, not a sorted set"},
		{"visibility out of range", redis.Config{URL: raw, VisibilityTimeout: time.Millisecond}, "VisibilityTimeout must be between 1s and 1h0m0s"},
		{"batch out of range", redis.Config{URL: raw, Batch: 5000}, "Batch must be between 1 and 2000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redis.Open(context.Background(), tc.cfg)
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

// TestRunFailsWhenRedisGoesAway cuts the connection (through a proxy) under
// a running scheduler: Run must return an error, not hang or spin, and the
// timers must still be delivered once Redis is back.
func TestRunFailsWhenRedisGoesAway(t *testing.T) {
	t.Parallel()
	raw, c := setup(t)
	p := testenv.NewProxy(t, hostOf(t, raw))
	ns := hourglasstest.Namespace(t)
	s := open(t, redis.Config{URL: "redis://" + p.Addr() + "/0", Namespace: ns, MaxWait: 50 * time.Millisecond}, c)
	var mu sync.Mutex
	got := map[int64]int{}
	deliver := func(_ context.Context, due []hourglass.DueItem) error {
		mu.Lock()
		defer mu.Unlock()
		for _, tm := range due {
			got[tm.ID]++
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	p.Cut()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "redis: claim due timers") {
			t.Fatalf("Run returned %v; want a claim error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of Redis going away")
	}
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 1, At: time.Now()}}); err == nil {
		t.Fatal("Schedule succeeded with Redis away")
	}
	p.Restore()
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 7, At: time.Now().Add(50 * time.Millisecond)}}); err != nil {
		t.Fatalf("Schedule after Redis came back: %v", err)
	}
	go func() { done <- s.Run(ctx, deliver) }()
	testenv.Eventually(t, 5*time.Second, "the timer delivered after Redis came back", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got[7] == 1
	})

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after ctx end: %v", err)
	}
}

func hostOf(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
